"""WSGI entry point: ``gunicorn nodeflow.wsgi``."""
import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "nodeflow.settings")
application = get_wsgi_application()
