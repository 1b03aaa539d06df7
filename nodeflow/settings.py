"""Settings, read from the environment (django-environ).

Every variable is documented in the README's configuration table. A ``.env``
file at the project root is read when present; the real environment wins.
"""

import hashlib
import json
import os
from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = BASE_DIR / "var"

env = environ.Env()
if (BASE_DIR / ".env").is_file():
    environ.Env.read_env(BASE_DIR / ".env")

# The development key only ever signs sessions of a local admin; production
# must set SECRET_KEY (``manage.py nodeflow_check`` says so).
SECRET_KEY = env("SECRET_KEY", default="nodeflow-insecure-development-key-change-me")
DEBUG = env.bool("DEBUG", default=False)
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "[::1]", "testserver"])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "nodeflow",
    "metadata",
    "executions",
    "quotas",
    "console",
    "conductor_api",
    "tools",
]

MIDDLEWARE = [
    "nodeflow.http_metrics.HttpMetricsMiddleware",  # outermost: times and counts every answer
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "nodeflow.urls"
WSGI_APPLICATION = "nodeflow.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

# --- Database ---------------------------------------------------------------
# Unset DATABASE_URL: an embedded SQLite file under var/. SQLite serialises
# writers, so every transaction begins IMMEDIATE (takes the write lock up
# front instead of failing to upgrade a read lock) and waits on a busy lock.
SQLITE_BUSY_TIMEOUT_S = 30.0
DEFAULT_SQLITE_PATH = VAR_DIR / "nodeflow.sqlite3"
DATABASES = {"default": env.db("DATABASE_URL", default=f"sqlite:///{DEFAULT_SQLITE_PATH}")}
DATABASES["default"]["CONN_MAX_AGE"] = env.int("CONN_MAX_AGE", default=0)
# Off by default: a health check is a query (and a commit) per request. A kept
# connection the server closed (a restart) is dropped before each request and
# tick without a query (nodeflow/stale_connections.py); only a restart in the
# middle of a request fails it.
DATABASES["default"]["CONN_HEALTH_CHECKS"] = env.bool("CONN_HEALTH_CHECKS", default=False)

if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    _name = DATABASES["default"]["NAME"]
    if _name and _name != ":memory:":
        Path(_name).parent.mkdir(parents=True, exist_ok=True)
    DATABASES["default"]["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": SQLITE_BUSY_TIMEOUT_S,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
    # Tests on SQLite use a file, so that several processes can share it.
    DATABASES["default"]["TEST"] = {
        "NAME": env("NODE_FLOW_SQLITE_TEST_DB", default=str(VAR_DIR / "test_nodeflow.sqlite3"))
    }

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Metrics (docs/metrics.md) -----------------------------------------------
# prometheus_client's multi-process mode: every process of a deployment keeps
# its counters in files in this directory, and /metrics on any of them serves
# the sum. prometheus_client reads the variable when it is first imported,
# which is after the settings. Unset: a directory per database under var/, so
# the API workers and the roles of one deployment share it with no set-up.
# Set empty: each process serves only its own counters.


def metrics_dir_for(database: dict) -> str:
    """The metrics directory of a database's processes (``DATABASES`` entry):
    what they use when ``PROMETHEUS_MULTIPROC_DIR`` is unset."""
    identity = "|".join(str(database.get(part) or "") for part in ("ENGINE", "HOST", "PORT", "NAME"))
    name = Path(str(database.get("NAME") or "db")).name
    return str(VAR_DIR / "prometheus" / f"{name}-{hashlib.sha256(identity.encode()).hexdigest()[:8]}")


# Read as is: django-environ takes an empty value for unset.
PROMETHEUS_MULTIPROC_DIR = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
if PROMETHEUS_MULTIPROC_DIR is None:
    PROMETHEUS_MULTIPROC_DIR = metrics_dir_for(DATABASES["default"])
if PROMETHEUS_MULTIPROC_DIR:
    Path(PROMETHEUS_MULTIPROC_DIR).mkdir(parents=True, exist_ok=True)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = PROMETHEUS_MULTIPROC_DIR
else:
    os.environ.pop("PROMETHEUS_MULTIPROC_DIR", None)  # set but empty would still mean "multi-process"

AUTH_PASSWORD_VALIDATORS = [{"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"}]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
# WhiteNoise serves the admin's and the API docs' assets from the installed
# packages (no collectstatic step, no assets from the internet).
WHITENOISE_USE_FINDERS = True
STATIC_ROOT.mkdir(parents=True, exist_ok=True)

# --- API ----------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "nodeflow.auth.ApiKeyAuthentication",
        "nodeflow.auth.StaffSessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["nodeflow.auth.HasScope"],
    "DEFAULT_PARSER_CLASSES": [
        "nodeflow.parsers.JSONParser",
        "nodeflow.parsers.YAMLParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "nodeflow.negotiation.JSONFirstNegotiation",
    "DEFAULT_RENDERER_CLASSES": [
        "rest_framework.renderers.JSONRenderer",
        "rest_framework.renderers.BrowsableAPIRenderer",
    ],
    "EXCEPTION_HANDLER": "nodeflow.errors.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "nodeflow.schema.ApiAutoSchema",
    "UNAUTHENTICATED_USER": None,
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Node Flow API",
    "DESCRIPTION": "Durable workflow orchestration: definitions, executions, workers and execution controls.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    # The API takes JSON (and YAML); the form parsers serve the browsable API
    # only, and no strict body field accepts their all-string values.
    "PARSER_WHITELIST": ["nodeflow.parsers.JSONParser", "nodeflow.parsers.YAMLParser"],
    # Swagger UI served from the installed package: no assets from the internet.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # Node Flow's routes only: the Conductor-compatible ones speak Conductor's dialect.
    "PREPROCESSING_HOOKS": ["nodeflow.schema.exclude_foreign_dialects"],
    # Closed sets, each one named component (a generated client's enum).
    "ENUM_NAME_OVERRIDES": {
        "ExecutionStatus": "executions.models.ExecutionStatus",
        "TaskStatus": "executions.models.TaskStatus",
        "ResultStatus": "executions.schema_shapes.RESULT_STATUS_CHOICES",
        "TaskType": "executions.schema_shapes.TASK_TYPE_CHOICES",
        "BreakerState": "executions.schema_shapes.BREAKER_STATE_CHOICES",
        "RetryLogic": "metadata.models.RetryLogic",
        "TaskTimeoutPolicy": "metadata.models.TimeoutPolicy",
        "WorkflowTimeoutPolicy": "metadata.validation.WORKFLOW_TIMEOUT_POLICIES",
        "SwitchEvaluator": "metadata.task_types.SWITCH_EVALUATORS",
        "HealthStatus": ["ok", "unavailable"],
    },
    "ENUM_GENERATE_CHOICE_DESCRIPTION": False,  # the labels only repeat the values
    "TAGS": [
        {"name": "definitions", "description": "Task and workflow definitions, and workflow versions"},
        {"name": "executions", "description": "Start, read and steer executions"},
        {"name": "workers", "description": "Poll, heartbeat and report results; inbound webhooks"},
        {"name": "controls", "description": "Semaphores, quotas, queues and circuit breakers"},
        {"name": "schedules", "description": "Cron schedules that start workflows"},
        {"name": "secrets", "description": "Secrets that WEBHOOK tasks sign with"},
        {"name": "service", "description": "Health"},
    ],
}

# Largest request body accepted (bytes); larger bodies get 413.
NODE_FLOW_MAX_BODY_BYTES = env.int("NODE_FLOW_MAX_BODY_BYTES", default=1_048_576)
DATA_UPLOAD_MAX_MEMORY_SIZE = NODE_FLOW_MAX_BODY_BYTES
# Deepest nesting of a JSON (or YAML) value: request bodies deeper get 400,
# script results and HTTP replies deeper fail their task (nodeflow/nesting.py).
NODE_FLOW_MAX_JSON_DEPTH = env.int("NODE_FLOW_MAX_JSON_DEPTH", default=100)
# Failed authentications a client address may make per minute (per API
# process) before it is answered 429 without a lookup (nodeflow.throttling).
NODE_FLOW_AUTH_FAILURES_PER_MINUTE = env.int("NODE_FLOW_AUTH_FAILURES_PER_MINUTE", default=30)
# When set, GET /metrics needs it: "Authorization: Bearer <key>" (what
# Prometheus sends with bearer_token) or the x-api-key header.
NODE_FLOW_METRICS_KEY = env("NODE_FLOW_METRICS_KEY", default="")
# True: GET /metrics needs an API key of any role (or NODE_FLOW_METRICS_KEY),
# in x-api-key or as "Authorization: Bearer <key>".
NODE_FLOW_METRICS_REQUIRE_KEY = env.bool("NODE_FLOW_METRICS_REQUIRE_KEY", default=False)


# --- Engine -------------------------------------------------------------------
def _gc_threshold(raw: str) -> tuple[int, ...]:
    try:
        values = tuple(int(part) for part in raw.split(",") if part.strip())
    except ValueError as exc:
        raise ImproperlyConfigured(f"NODE_FLOW_GC_THRESHOLD must be integers separated by commas, not {raw!r}") from exc
    if len(values) > 3 or any(value < 0 for value in values):
        raise ImproperlyConfigured(f"NODE_FLOW_GC_THRESHOLD takes one to three non-negative integers, not {raw!r}")
    return values


NODE_FLOW_MAX_FORK_ITEMS = env.int("NODE_FLOW_MAX_FORK_ITEMS", default=10_000)
# The execution view shows at most this many of its run's rows; the rest
# come a page at a time from GET …/executions/{id}/tasks (its `tasksNext`).
NODE_FLOW_EXECUTION_VIEW_TASKS = env.int("NODE_FLOW_EXECUTION_VIEW_TASKS", default=1000)
# A DO_WHILE whose iterations finish within the decision (operators only)
# is decided in steps: one decision runs at most this many iterations, and
# starts none once it has run NODE_FLOW_DECISION_SECONDS; a follow-up
# decision (the decider role) goes on from there. So no request or decide
# holds its thread and the execution's lock much longer than that.
NODE_FLOW_LOOP_ITERATIONS_PER_DECISION = env.int("NODE_FLOW_LOOP_ITERATIONS_PER_DECISION", default=100)
NODE_FLOW_DECISION_SECONDS = env.float("NODE_FLOW_DECISION_SECONDS", default=0.25)
# The engine's fixed hot-path statements (executions/sql.py) are prepared on
# PostgreSQL once a connection has run them twice. Turn off behind a pooler
# that cannot carry prepared statements (PgBouncer in transaction mode
# before 1.21, or without max_prepared_statements).
NODE_FLOW_PREPARED_STATEMENTS = env.bool("NODE_FLOW_PREPARED_STATEMENTS", default=True)
# Host-local wake-ups (executions/host_wake.py, PostgreSQL on Linux): a
# task made ready wakes a long-poll parked in any server process of this
# host through a registry under NODE_FLOW_HOST_WAKE_DIR (default /dev/shm)
# and Unix datagram sockets, not a NOTIFY that every listening session pays
# a transaction to read. Only where every server process of the database
# runs on one host (or in one container): docs/deployment.md.
NODE_FLOW_HOST_WAKE = env.bool("NODE_FLOW_HOST_WAKE", default=False)
NODE_FLOW_HOST_WAKE_DIR = env("NODE_FLOW_HOST_WAKE_DIR", default="")
# The garbage collector's thresholds in server processes (gc.set_threshold;
# nodeflow/process.py): one to three integers, or empty for CPython's own.
NODE_FLOW_GC_THRESHOLD = _gc_threshold(env("NODE_FLOW_GC_THRESHOLD", default="10000,10,10"))
# How long a server process's thread may hold the GIL while another waits
# for it (sys.setswitchinterval; nodeflow/process.py), in milliseconds.
NODE_FLOW_SWITCH_INTERVAL_MS = env.float("NODE_FLOW_SWITCH_INTERVAL_MS", default=1.0)
if not 0 < NODE_FLOW_SWITCH_INTERVAL_MS <= 100:
    raise ImproperlyConfigured(
        f"NODE_FLOW_SWITCH_INTERVAL_MS must be above 0 and at most 100, not {NODE_FLOW_SWITCH_INTERVAL_MS}"
    )


def _circuit_breaker_config(raw: str) -> dict:
    try:
        value = json.loads(raw) if raw else {}
    except json.JSONDecodeError as exc:
        raise ImproperlyConfigured(f"NODE_FLOW_CIRCUIT_BREAKER is not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise ImproperlyConfigured("NODE_FLOW_CIRCUIT_BREAKER must be a JSON object")
    return value


NODE_FLOW_CIRCUIT_BREAKER = _circuit_breaker_config(env("NODE_FLOW_CIRCUIT_BREAKER", default=""))

# --- System tasks (docs/system-tasks.md) -------------------------------------
# Worker threads of one ``nodeflow_systemtasks`` process.
NODE_FLOW_SYSTEM_TASK_THREADS = env.int("NODE_FLOW_SYSTEM_TASK_THREADS", default=8)
# The lease a runner holds on a system task while it calls the hook: taken
# this long (or the policy's shorter heartbeat or start-to-close timeout)
# and renewed every third of it until the call returns, so a runner killed
# mid-call is noticed within it and the attempt offered again (see
# docs/reliability.md, "Recovery after a kill"). Longer survives longer
# stalls of a runner (a renewal that cannot reach the database); shorter
# recovers sooner.
NODE_FLOW_SYSTEM_TASK_LEASE_SECONDS = env.float("NODE_FLOW_SYSTEM_TASK_LEASE_SECONDS", default=3.0)
# The longest one call of a hook may take (Context.deadline), however often
# its lease is renewed; a shorter startToCloseTimeout of the task shortens it.
NODE_FLOW_SYSTEM_TASK_CALL_SECONDS = env.float("NODE_FLOW_SYSTEM_TASK_CALL_SECONDS", default=120.0)
if NODE_FLOW_SYSTEM_TASK_LEASE_SECONDS <= 0 or NODE_FLOW_SYSTEM_TASK_CALL_SECONDS <= 0:
    raise ImproperlyConfigured(
        "NODE_FLOW_SYSTEM_TASK_LEASE_SECONDS and NODE_FLOW_SYSTEM_TASK_CALL_SECONDS must be positive"
    )
# Outbound hosts: comma-separated CIDRs, addresses and host names (".example.com"
# also matches subdomains), checked after DNS resolution. Deny wins; an empty
# allow-list allows every host the deny-list does not refuse.
NODE_FLOW_OUTBOUND_DENY = env.list(
    "NODE_FLOW_OUTBOUND_DENY",
    default=[
        "169.254.0.0/16",
        "fe80::/10",
        "169.254.169.254",
        "fd00:ec2::254",
        "100.100.100.200",
        "metadata.google.internal",
        "metadata.goog",
    ],
)
NODE_FLOW_OUTBOUND_ALLOW = env.list("NODE_FLOW_OUTBOUND_ALLOW", default=[])
# Addresses that are not globally routable (loopback, private, link-local,
# shared) are refused unless listed here (CIDRs, addresses, host names):
# e.g. "10.20.0.0/16,.svc.cluster.local" for services inside the network.
NODE_FLOW_OUTBOUND_ALLOW_PRIVATE = env.list("NODE_FLOW_OUTBOUND_ALLOW_PRIVATE", default=[])
# WEBHOOK signing secrets by "<namespace>/<secretName>" (JSON object), beside
# those set with PUT /v1/ns/{ns}/secrets/{name}; NODE_FLOW_SECRET_<NS>__<NAME>
# environment variables are read too.
NODE_FLOW_WEBHOOK_SECRETS = env.json("NODE_FLOW_WEBHOOK_SECRETS", default={})
# INLINE scripts: time and memory limits of one evaluation.
NODE_FLOW_INLINE_TIMEOUT_SECONDS = env.float("NODE_FLOW_INLINE_TIMEOUT_SECONDS", default=2.0)
NODE_FLOW_INLINE_MAX_MEMORY_MB = env.int("NODE_FLOW_INLINE_MAX_MEMORY_MB", default=64)

# --- Celery -------------------------------------------------------------------
# Optional. Unset: system tasks and sweeps run in the nodeflow_* roles.
CELERY_BROKER_URL = env("CELERY_BROKER_URL", default="") or None
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_IGNORE_RESULT = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_DEFAULT_QUEUE = env("CELERY_TASK_DEFAULT_QUEUE", default="nodeflow")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env("LOG_LEVEL", default="INFO")},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        "httpx": {"level": "WARNING"},
        "httpcore": {"level": "WARNING"},
    },
}
