"""The Celery application.

Celery is optional: when ``CELERY_BROKER_URL`` is unset the system tasks run in
``manage.py nodeflow_systemtasks`` (or ``nodeflow_run``) instead. The database
stays the source of truth either way; a Celery message only says "look now".
"""
import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "nodeflow.settings")

app = Celery("nodeflow")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
