"""Authentication and authorisation for the API.

Keys arrive in the ``x-api-key`` header. A key belongs to one namespace (or to
all) and carries a role; each role grants a set of scopes, and each view says
which scope every HTTP method needs. Missing or unknown key: 401. Wrong
namespace or a role without the scope: 403.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from rest_framework import authentication, exceptions, permissions

from nodeflow import throttling
from nodeflow.keys import resolve_api_key
from nodeflow.models import Role

API_KEY_HEADER = "x-api-key"
_API_KEY_META = "HTTP_X_API_KEY"  # the header as WSGI names it: read from META, without building request.headers


class Scope(StrEnum):
    TASKDEFS_READ = "taskdefs:read"
    TASKDEFS_WRITE = "taskdefs:write"
    WORKFLOWS_READ = "workflows:read"
    WORKFLOWS_WRITE = "workflows:write"
    EXECUTIONS_READ = "executions:read"
    EXECUTIONS_WRITE = "executions:write"
    HUMAN_TASKS = "human:write"
    TASKS_WORK = "tasks:work"
    CONTROLS_READ = "controls:read"
    CONTROLS_WRITE = "controls:write"
    QUOTAS = "quotas"
    SECRETS = "secrets"


ROLE_SCOPES: dict[str, frozenset[Scope]] = {
    Role.ADMIN: frozenset(Scope),
    Role.DEVELOPER: frozenset(
        {
            Scope.TASKDEFS_READ,
            Scope.TASKDEFS_WRITE,
            Scope.WORKFLOWS_READ,
            Scope.WORKFLOWS_WRITE,
            Scope.EXECUTIONS_READ,
            Scope.EXECUTIONS_WRITE,
            Scope.HUMAN_TASKS,
            Scope.CONTROLS_READ,
        }
    ),
    Role.WORKER: frozenset({Scope.TASKDEFS_READ, Scope.TASKS_WORK}),
}


@dataclass(frozen=True)
class Principal:
    """Who is calling: a role, and a namespace (None for every namespace)."""

    role: str
    namespace: str | None
    label: str
    key_id: int | None = None

    is_authenticated = True

    def __str__(self) -> str:
        # What the browsable API's header shows: "admin key nf_ab12… (namespace default)".
        label = f"{self.label}…" if self.key_id is not None else self.label
        where = f"namespace {self.namespace}" if self.namespace is not None else "every namespace"
        return f"{self.role} {label} ({where})"

    def may_use(self, namespace: str) -> bool:
        return self.namespace is None or self.namespace == namespace

    def has_scope(self, scope: Scope) -> bool:
        return scope in ROLE_SCOPES.get(self.role, frozenset())

    def has_any_scope(self, scopes: Scope | tuple[Scope, ...]) -> bool:
        """Whether it has ``scopes`` (a tuple: any one of them)."""
        allowed = scopes if isinstance(scopes, tuple) else (scopes,)
        return any(self.has_scope(scope) for scope in allowed)


class ApiKeyAuthentication(authentication.BaseAuthentication):
    """The ``x-api-key`` header. A client that keeps failing is throttled
    (nodeflow.throttling) before its key is even looked at; a key that
    cannot exist (not the shape every key has) costs no database query."""

    def authenticate(self, request):
        raw = request.META.get(_API_KEY_META)
        if raw is None:
            return None
        client = client_address(request)
        wait = throttling.wait_s(client)
        if wait is not None:
            raise exceptions.Throttled(
                wait=max(1.0, wait),
                detail=(
                    "too many failed authentications from this address; "
                    f"try again in {max(1, int(-(-wait // 1)))} s (NODE_FLOW_AUTH_FAILURES_PER_MINUTE)"
                ),
            )
        key = resolve_api_key(raw.strip())
        if key is None:
            throttling.failed(client)
            raise exceptions.AuthenticationFailed("unknown or revoked API key")
        return Principal(role=key.role, namespace=key.namespace, label=f"key {key.prefix}", key_id=key.id), key

    def authenticate_header(self, request) -> str:
        # Makes DRF answer 401 (not 403) when no credentials were given.
        return API_KEY_HEADER


def client_address(request) -> str:
    """The peer's address (a proxy in front should be the one to throttle by
    its own client header; Node Flow does not trust forwarded headers)."""
    return request.META.get("REMOTE_ADDR") or "unknown"


class StaffSessionAuthentication(authentication.SessionAuthentication):
    """A logged-in staff user (Django admin) acts as an admin of every namespace,
    which is what makes the browsable API usable from a browser."""

    def authenticate(self, request):
        result = super().authenticate(request)
        if result is None:
            return None
        user, _ = result
        if not user.is_staff:
            return None
        return Principal(role=Role.ADMIN, namespace=None, label=f"staff {user.get_username()}"), None


def _implements(view, method: str) -> bool:
    """Whether DRF would dispatch ``method`` to a handler (the same test it uses)."""
    name = method.lower()
    return name in view.http_method_names and hasattr(view, name)


class HasScope(permissions.BasePermission):
    """Checks the principal against the view's ``scopes`` (method → Scope) and
    the URL's ``ns``. A view without ``scopes`` is open (health, schema)."""

    message = "this API key may not do that"

    def has_permission(self, request, view) -> bool:
        scopes: dict[str, Scope | tuple[Scope, ...]] | None = getattr(view, "scopes", None)
        if scopes is None:
            return True
        principal = request.user
        if not isinstance(principal, Principal):
            raise exceptions.NotAuthenticated(f"send an API key in the {API_KEY_HEADER} header")
        namespace = view.kwargs.get("ns")
        if namespace is not None and not principal.may_use(namespace):
            raise exceptions.PermissionDenied(f"this API key is not valid for namespace '{namespace}'")
        if not _implements(view, request.method):
            return True  # a method the route lacks: let the view answer 405, not 403
        scope = scopes.get(request.method) or scopes.get("*")
        if request.method in ("HEAD", "OPTIONS"):
            scope = scopes.get("GET", scope)
        if scope is None or not principal.has_any_scope(scope):
            raise exceptions.PermissionDenied(f"role '{principal.role}' may not {request.method} here")
        return True
