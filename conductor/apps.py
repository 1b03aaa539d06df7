from django.apps import AppConfig


class ConductorConfig(AppConfig):
    name = "conductor"
    verbose_name = "Conductor-compatible API"
