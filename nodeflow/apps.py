from django.apps import AppConfig


class NodeflowConfig(AppConfig):
    name = "nodeflow"
    verbose_name = "Node Flow: namespaces and API keys"

    def ready(self) -> None:
        from nodeflow import health, schema  # noqa: F401 - register the deploy checks and schema extensions
