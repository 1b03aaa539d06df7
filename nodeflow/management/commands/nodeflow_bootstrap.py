"""``manage.py nodeflow_bootstrap``: the ``default`` namespace and, the first
time only, an admin key for it, printed once on the last stdout line."""

from django.core.management.base import BaseCommand

from nodeflow.keys import create_api_key, ensure_namespace
from nodeflow.models import ApiKey, Role


class Command(BaseCommand):
    help = "Create the default namespace and its first admin key (printed once)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--namespace", default="default")

    def handle(self, *args, namespace: str, **options) -> None:
        ns = ensure_namespace(name=namespace)
        if ApiKey.objects.filter(namespace=ns, role=Role.ADMIN, revoked_at__isnull=True).exists():
            self.stdout.write(
                f"namespace '{namespace}' already has an admin key; make another with "
                f"'manage.py nodeflow_apikey create --namespace {namespace} --role admin'"
            )
            return
        _, raw = create_api_key(role=Role.ADMIN, namespace=namespace, name="bootstrap")
        self.stdout.write(f"admin API key for namespace '{namespace}' (shown once; keep it):")
        self.stdout.write(raw)
