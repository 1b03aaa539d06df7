from django.apps import AppConfig


class NodeflowConfig(AppConfig):
    name = "nodeflow"
    verbose_name = "Node Flow: namespaces and API keys"

    def ready(self) -> None:
        from django.core.signals import request_started

        from nodeflow import deployment_check, schema  # noqa: F401 - importing registers the deploy checks and schema extensions
        from nodeflow.stale_connections import close_dead_connections

        request_started.connect(close_dead_connections, dispatch_uid="nodeflow.close_dead_connections")
