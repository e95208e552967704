"""Settings of the Celery worker that bench/transactions.py starts: goaai's own,
plus the module that counts the worker's statements and transactions."""

from goaai.settings import *  # noqa: F403

CELERY_IMPORTS = ["bench._counting_worker"]
DEBUG = False
