"""The deployment check behind ``manage.py nodeflow_check``: the database,
migrations, the broker, the settings, the bootstrap rows and whether the
background roles keep up. Each check returns a ``Finding``: OK, WARN or
FAIL, what is wrong and how to fix it.

The settings checks (no I/O) are also registered with Django's system check
framework under the ``nodeflow`` tag, for ``manage.py check --deploy``.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.db import connection

OK, WARN, FAIL = "OK", "WARN", "FAIL"
DEV_SECRET_KEY = "nodeflow-insecure-development-key-change-me"
LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "[::1]", "::1", "testserver"}
# Work due longer ago than this means the role that does it is not running
# (or cannot keep up): each claims due work within a second when idle.
ROLE_LAG_WARN_S = 60.0
BROKER_TIMEOUT_S = 3.0
CONNECTIONS_WARN_RATIO = 0.8
HOSTNAME = re.compile(r"^\.?[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*\.?$", re.I)


@dataclass(frozen=True)
class Finding:
    level: str
    name: str
    message: str
    fix: str = ""


Check = Callable[[], list[Finding]]


def run_checks(*, include_live: bool = True) -> list[Finding]:
    """Every check, in order. One that raises is reported as a FAIL; the
    checks that read tables are skipped when the database or its migrations
    failed (their errors would only repeat that)."""
    found: list[Finding] = []
    for check in (SETTINGS_CHECKS + LIVE_CHECKS) if include_live else SETTINGS_CHECKS:
        name = check.__name__.removeprefix("check_")
        if check in NEEDS_TABLES and any(f.level == FAIL and f.name in ("database", "migrations") for f in found):
            found.append(Finding(WARN, name, "skipped: the database or its migrations failed above"))
            continue
        try:
            found += check()
        except Exception as exc:  # noqa: BLE001 - the check reports, it never crashes
            found.append(Finding(FAIL, name, f"the check itself failed: {exc!r}"))
    return found


# --- settings -----------------------------------------------------------------


def _exposed() -> bool:
    """Whether the server answers to a host other than this machine's loopback."""
    return any(host not in LOOPBACK_HOSTS for host in settings.ALLOWED_HOSTS)


def check_secret_key() -> list[Finding]:
    key = settings.SECRET_KEY
    if settings.DEBUG:
        return [Finding(OK, "secret_key", "DEBUG is on: the development key is acceptable")]
    fix = 'set SECRET_KEY to a long random value, e.g. python -c "import secrets; print(secrets.token_urlsafe(50))"'
    if key == DEV_SECRET_KEY:
        if _exposed():
            return [
                Finding(
                    FAIL,
                    "secret_key",
                    "SECRET_KEY is the public development key and the server "
                    "answers to other hosts: anyone can forge an admin session",
                    fix,
                )
            ]
        return [
            Finding(
                WARN,
                "secret_key",
                "SECRET_KEY is the development key (acceptable only while the server answers on loopback alone)",
                fix,
            )
        ]
    if len(key) < 50 or len(set(key)) < 5:
        return [Finding(WARN, "secret_key", "SECRET_KEY is short or repetitive", fix)]
    return [Finding(OK, "secret_key", "set")]


def check_debug() -> list[Finding]:
    if settings.DEBUG:
        return [
            Finding(
                WARN,
                "debug",
                "DEBUG is on: error pages show settings and code to clients",
                "unset DEBUG (or DEBUG=false) in production",
            )
        ]
    return [Finding(OK, "debug", "off")]


def check_allowed_hosts() -> list[Finding]:
    hosts = list(settings.ALLOWED_HOSTS)
    if not hosts:
        return [
            Finding(
                FAIL,
                "allowed_hosts",
                "ALLOWED_HOSTS is empty: every request gets 400",
                "set ALLOWED_HOSTS to the names clients use, comma-separated",
            )
        ]
    if "*" in hosts:
        return [
            Finding(
                WARN,
                "allowed_hosts",
                "ALLOWED_HOSTS contains '*': any Host header is accepted",
                "list the host names clients use",
            )
        ]
    scope = "loopback only" if not _exposed() else ", ".join(hosts)
    return [Finding(OK, "allowed_hosts", scope)]


def check_circuit_breaker() -> list[Finding]:
    from executions.breakers import Config

    raw = settings.NODE_FLOW_CIRCUIT_BREAKER
    fix = (
        'set NODE_FLOW_CIRCUIT_BREAKER to a JSON object, e.g. {"enabled": true, "failureRatio": 0.5, '
        '"minimumRequests": 10, "windowMs": 30000, "openMs": 5000, "maxOpenMs": 60000}'
    )
    try:
        value = json.loads(raw) if isinstance(raw, str) else raw
        if value is not None and not isinstance(value, dict):
            raise ImproperlyConfigured("NODE_FLOW_CIRCUIT_BREAKER must be a JSON object")
        config = Config.parse(value)
    except (ValueError, TypeError, ImproperlyConfigured) as exc:
        return [Finding(FAIL, "circuit_breaker", f"NODE_FLOW_CIRCUIT_BREAKER does not parse: {exc}", fix)]
    if not config.enabled:
        return [Finding(OK, "circuit_breaker", "off")]
    return [
        Finding(
            OK,
            "circuit_breaker",
            f"on: failureRatio {config.failure_ratio}, minimumRequests "
            f"{config.minimum_requests}, window {config.window_s:g} s, open {config.open_s:g}–{config.max_open_s:g} s",
        )
    ]


def check_webhook_secrets() -> list[Finding]:
    raw = settings.NODE_FLOW_WEBHOOK_SECRETS
    fix = (
        'set NODE_FLOW_WEBHOOK_SECRETS to a JSON object of "<namespace>/<secretName>" → secret, '
        'e.g. {"default/partner": "s3cr3t"}, or PUT /v1/ns/{ns}/secrets/{name}'
    )
    try:
        value = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError as exc:
        return [Finding(FAIL, "webhook_secrets", f"NODE_FLOW_WEBHOOK_SECRETS is not valid JSON: {exc}", fix)]
    if not isinstance(value, dict):
        return [Finding(FAIL, "webhook_secrets", "NODE_FLOW_WEBHOOK_SECRETS must be a JSON object", fix)]
    bad = sorted(str(name) for name, secret in value.items() if not isinstance(secret, str) or not secret)
    if bad:
        return [Finding(FAIL, "webhook_secrets", f"secrets that are not non-empty strings: {', '.join(bad)}", fix)]
    unscoped = sorted(str(name) for name in value if "/" not in str(name))
    if unscoped:
        return [
            Finding(
                WARN,
                "webhook_secrets",
                f"secrets without a namespace are ignored (a task uses only its own "
                f"namespace's): {', '.join(unscoped)}",
                fix,
            )
        ]
    return [Finding(OK, "webhook_secrets", f"{len(value)} secret(s)")]


def check_outbound_lists() -> list[Finding]:
    found = []
    for setting in ("NODE_FLOW_OUTBOUND_DENY", "NODE_FLOW_OUTBOUND_ALLOW", "NODE_FLOW_OUTBOUND_ALLOW_PRIVATE"):
        entries = [e.strip() for e in getattr(settings, setting) if e.strip()]
        bad = [entry for entry in entries if not _is_rule(entry)]
        if bad:
            found.append(
                Finding(
                    FAIL,
                    setting.lower().removeprefix("node_flow_"),
                    f"{setting}: not a CIDR, address or host name: {', '.join(bad)}",
                    "fix the entries (e.g. 10.0.0.0/8, 169.254.169.254, .internal)",
                )
            )
        else:
            found.append(Finding(OK, setting.lower().removeprefix("node_flow_"), f"{len(entries)} entr(ies)"))
    return found


def _is_rule(entry: str) -> bool:
    try:
        ipaddress.ip_network(entry, strict=False)
        return True
    except ValueError:
        return bool(HOSTNAME.match(entry)) and "/" not in entry


def check_database_settings() -> list[Finding]:
    database = settings.DATABASES["default"]
    if database["ENGINE"] == "django.db.backends.sqlite3":
        if _exposed() and not settings.DEBUG:
            return [
                Finding(
                    WARN,
                    "database_settings",
                    "SQLite in production: one writer at a time, one machine only",
                    "set DATABASE_URL=postgres://… (see docs/deployment.md)",
                )
            ]
        return [Finding(OK, "database_settings", "SQLite (embedded, one machine)")]
    if database.get("CONN_MAX_AGE", 0) == 0:
        return [
            Finding(
                WARN,
                "database_settings",
                "CONN_MAX_AGE=0: every request opens a new PostgreSQL connection",
                "set CONN_MAX_AGE=60 (or pool with pgbouncer; see docs/deployment.md)",
            )
        ]
    return [Finding(OK, "database_settings", f"PostgreSQL, CONN_MAX_AGE={database['CONN_MAX_AGE']}")]


SETTINGS_CHECKS: list[Check] = [
    check_secret_key,
    check_debug,
    check_allowed_hosts,
    check_database_settings,
    check_circuit_breaker,
    check_webhook_secrets,
    check_outbound_lists,
]


# --- the database, the broker, and what is in the database ---------------------


def check_database() -> list[Finding]:
    started = time.monotonic()
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:  # noqa: BLE001 - any failure to connect is the finding, reported with its text
        return [Finding(FAIL, "database", f"cannot connect: {exc}", "check DATABASE_URL and that the server runs")]
    elapsed_ms = (time.monotonic() - started) * 1000
    found = [Finding(OK, "database", f"{connection.vendor} answers ({elapsed_ms:.0f} ms)")]
    if connection.vendor == "postgresql":
        found += _postgres_connections() + _postgres_autovacuum()
    return found


def _postgres_autovacuum() -> list[Finding]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('autovacuum')")
        (setting,) = cursor.fetchone()
    if setting != "on":
        return [
            Finding(
                WARN,
                "autovacuum",
                "autovacuum is off: dead row versions pile up, and without fresh "
                "statistics PostgreSQL plans the batch statements as scans of whole tables",
                "turn autovacuum on, or run VACUUM ANALYZE from cron (docs/deployment.md)",
            )
        ]
    return [Finding(OK, "autovacuum", "on")]


def _postgres_connections() -> list[Finding]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('max_connections')::int, count(*) FROM pg_stat_activity")
        limit, used = cursor.fetchone()
    if used >= CONNECTIONS_WARN_RATIO * limit:
        return [
            Finding(
                WARN,
                "connections",
                f"{used} of max_connections {limit} in use",
                "raise max_connections or pool (processes × threads must fit; see docs/deployment.md)",
            )
        ]
    return [Finding(OK, "connections", f"{used} of max_connections {limit} in use")]


def check_migrations() -> list[Finding]:
    from django.db.migrations.executor import MigrationExecutor

    executor = MigrationExecutor(connection)
    plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    if plan:
        names = ", ".join(f"{m.app_label}.{m.name}" for m, _ in plan[:5]) + (" …" if len(plan) > 5 else "")
        return [Finding(FAIL, "migrations", f"{len(plan)} migration(s) not applied: {names}", "run manage.py migrate")]
    return [Finding(OK, "migrations", "all applied")]


def check_broker() -> list[Finding]:
    url = settings.CELERY_BROKER_URL
    if not url:
        return [Finding(OK, "broker", "CELERY_BROKER_URL unset: system tasks run in nodeflow_systemtasks")]
    from kombu import Connection

    fix = "check CELERY_BROKER_URL (e.g. redis://127.0.0.1:6379/0) and that the broker runs"
    try:
        with Connection(url, connect_timeout=BROKER_TIMEOUT_S) as broker:
            broker.ensure_connection(max_retries=1, interval_start=0, timeout=BROKER_TIMEOUT_S)
    except Exception as exc:  # noqa: BLE001 - unknown transport, refused, timeout: all the same to the operator
        return [Finding(FAIL, "broker", f"cannot reach the broker at {_redact(url)}: {exc}", fix)]
    return [Finding(OK, "broker", f"{_redact(url)} reachable")]


def _redact(url: str) -> str:
    return re.sub(r"//([^:/@]*):[^@]*@", r"//\1:***@", url)


def check_bootstrap() -> list[Finding]:
    from nodeflow.models import ApiKey, Namespace, Role

    found = []
    namespaces = Namespace.objects.count()
    if not namespaces:
        found.append(Finding(FAIL, "namespaces", "no namespace exists", "run manage.py nodeflow_bootstrap"))
    else:
        found.append(Finding(OK, "namespaces", f"{namespaces}"))
    admins = ApiKey.objects.filter(role=Role.ADMIN, revoked_at__isnull=True).count()
    if not admins:
        found.append(
            Finding(
                FAIL,
                "admin_keys",
                "no active admin API key",
                "run manage.py nodeflow_apikey create --namespace default --role admin",
            )
        )
    else:
        found.append(Finding(OK, "admin_keys", f"{admins} active"))
    return found


def check_roles() -> list[Finding]:
    """Whether due work waits: each kind of work names the role that does it."""
    from executions.models import DecideRequest, Task, TaskStatus, Timer
    from nodeflow import clock
    from quotas.models import Schedule

    now = clock.now()
    oldest = {
        "decider": DecideRequest.objects.filter(due_at__lte=now).order_by("due_at").values_list("due_at", flat=True),
        "sweeper (timers)": Timer.objects.filter(due_at__lte=now).order_by("due_at").values_list("due_at", flat=True),
        "sweeper (leases)": Task.objects.filter(status=TaskStatus.IN_PROGRESS, lease_expires_at__lte=now)
        .order_by("lease_expires_at")
        .values_list("lease_expires_at", flat=True),
        "scheduler": Schedule.objects.filter(paused=False, next_fire_at__lte=now)
        .order_by("next_fire_at")
        .values_list("next_fire_at", flat=True),
    }
    return [_lag(role, rows.first(), now) for role, rows in oldest.items()]


def _lag(role: str, due: dt.datetime | None, now: dt.datetime) -> Finding:
    name = "role " + role
    if due is None:
        return Finding(OK, name, "nothing overdue")
    late = (now - due).total_seconds()
    if late > ROLE_LAG_WARN_S:
        command = {"decider": "nodeflow_decider", "scheduler": "nodeflow_scheduler"}.get(role, "nodeflow_sweeper")
        return Finding(
            WARN,
            name,
            f"the oldest due item has waited {late:.0f} s",
            f"make sure manage.py {command} runs (or nodeflow_run), and keeps up",
        )
    return Finding(OK, name, f"oldest due item {late:.1f} s late")


LIVE_CHECKS: list[Check] = [check_database, check_migrations, check_broker, check_bootstrap, check_roles]
NEEDS_TABLES: tuple[Check, ...] = (check_migrations, check_bootstrap, check_roles)


# --- Django's system check framework ---------------------------------------------


@checks.register("nodeflow", deploy=True)
def deploy_checks(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """The settings checks, for ``manage.py check --deploy``."""
    kinds = {WARN: checks.Warning, FAIL: checks.Error}
    return [
        kinds[f.level](f"{f.name}: {f.message}", hint=f.fix or None, id=f"nodeflow.{f.name}")
        for f in run_checks(include_live=False)
        if f.level in kinds
    ]
