"""``manage.py nodeflow_systemtasks``: run system tasks (HTTP, HTTP_POLL,
WEBHOOK, GRPC, INLINE, JSON_JQ_TRANSFORM) without Celery. Any number of copies."""

from executions.roles.command import RoleCommand
from executions.roles.systemtasks import SystemTaskRole


class Command(RoleCommand):
    help = "Lease and run ready system tasks (when CELERY_BROKER_URL is unset)."
    role_class = SystemTaskRole
