from django.apps import AppConfig


class MetadataConfig(AppConfig):
    name = "metadata"
    verbose_name = "Definitions"
