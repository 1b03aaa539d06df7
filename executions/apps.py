from django.apps import AppConfig


class ExecutionsConfig(AppConfig):
    name = "executions"
    verbose_name = "Executions"

    def ready(self) -> None:
        from executions.system_tasks import celery_handoff

        celery_handoff.install()  # with Celery: hand system tasks to workers after each commit
