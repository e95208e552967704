"""The Celery application behind the distributed executor (``celery -A goaai worker``)."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "goaai.settings")

app = Celery("goaai")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
