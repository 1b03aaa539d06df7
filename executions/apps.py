from django.apps import AppConfig


class ExecutionsConfig(AppConfig):
    name = "executions"
    verbose_name = "Executions"

    def ready(self) -> None:
        from executions.system_tasks import enqueue

        enqueue.install()  # with Celery: hand system tasks to workers after each commit
