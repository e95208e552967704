"""WSGI entry point, for serving the REST API and pages from a WSGI server."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "goaai.settings")

application = get_wsgi_application()
