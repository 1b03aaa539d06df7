"""``manage.py nodeflow_apikey create|list|revoke``.

``create`` prints the new key alone on its last stdout line, so scripts can
take it with ``| tail -n 1``. The key is also a Conductor key pair (the
Conductor-compatible routes, docs/conductor.md): ``keyId`` is the key's id,
printed on stderr (and first by ``list``), ``keySecret`` the key itself.
"""

from django.core.management.base import BaseCommand, CommandError

from nodeflow.keys import create_api_key, revoke_api_key
from nodeflow.models import ApiKey, Role


class Command(BaseCommand):
    help = "Create, list or revoke API keys."

    def add_arguments(self, parser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        create = sub.add_parser("create", help="create a key and print it (once)")
        scope = create.add_mutually_exclusive_group(required=True)
        scope.add_argument("--namespace", help="the namespace (created if needed)")
        scope.add_argument("--all-namespaces", action="store_true", help="a key valid in every namespace")
        create.add_argument("--role", required=True, choices=Role.values)
        create.add_argument("--name", default="", help="a label to recognise the key by")
        listing = sub.add_parser("list", help="list keys (never the keys themselves)")
        listing.add_argument("--namespace")
        revoke = sub.add_parser("revoke", help="revoke a key by id")
        revoke.add_argument("id", type=int)

    def handle(self, *args, action: str, **options) -> None:
        getattr(self, f"_{action}")(**options)

    def _create(self, *, namespace, all_namespaces, role, name, **_) -> None:
        try:
            key, raw = create_api_key(role=role, namespace=None if all_namespaces else namespace, name=name)
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        scope = "every namespace" if all_namespaces else namespace
        self.stderr.write(f"created key {key.pk} ({role} @ {scope}); it is shown once:")
        self.stderr.write(f"Conductor clients (POST …/api/token): keyId {key.pk}, keySecret the key below")
        self.stdout.write(raw)

    def _list(self, *, namespace, **_) -> None:
        keys = ApiKey.objects.select_related("namespace").order_by("pk")
        if namespace:
            keys = keys.filter(namespace__name=namespace)
        for key in keys:
            scope = key.namespace.name if key.namespace_id else "*"
            state = "revoked" if key.revoked_at else "active"
            self.stdout.write(f"{key.pk}\t{key.prefix}…\t{key.role}\t{scope}\t{state}\t{key.name}")

    def _revoke(self, *, id, **_) -> None:
        if not revoke_api_key(key_id=id):
            raise CommandError(f"no active key with id {id}")
        self.stdout.write(f"revoked key {id}")
