from django.apps import AppConfig


class ConductorConfig(AppConfig):
    name = "conductor_api"
    verbose_name = "Conductor-compatible API"
