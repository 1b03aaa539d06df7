"""The Celery application.

Celery is optional: when ``CELERY_BROKER_URL`` is unset the system tasks run in
``manage.py nodeflow_systemtasks`` (or ``nodeflow_run``) instead. The database
stays the source of truth either way; a Celery message only names a task to
look at (``executions.celery_tasks``). ``celery -A nodeflow worker`` runs system
tasks; ``celery -A nodeflow beat`` (or ``worker -B``) schedules the sweeps:
timers and expired leases every second, lost-message recovery every 5 s.
"""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "nodeflow.settings")

app = Celery("nodeflow")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(related_name="celery_tasks")  # executions/celery_tasks.py

SWEEP_EVERY_S = 1.0
RECOVER_EVERY_S = 5.0

app.conf.beat_schedule = {
    "nodeflow-sweep": {"task": "nodeflow.sweep", "schedule": SWEEP_EVERY_S, "options": {"expires": 10}},
    "nodeflow-recover-system-tasks": {
        "task": "nodeflow.recover_system_tasks",
        "schedule": RECOVER_EVERY_S,
        "options": {"expires": 30},
    },
}
