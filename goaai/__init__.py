"""goaai: run AI agents and record everything they do."""

from goaai.celery import app as celery_app

__all__ = ["celery_app"]
