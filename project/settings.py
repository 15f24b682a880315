"""Cronfleet settings. Everything that differs between deployments comes from the environment.

The readers in project/env.py fail loudly: a malformed value stops start-up with
ImproperlyConfigured naming the variable, instead of silently falling back to a default.
"""

import os
import re
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from project import databases
from project.env import env_bool, env_float, env_int, env_json_object, env_list, env_str
from scheduler_app.api.schema_settings import SETTINGS as _cronfleet_schema

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("CRONFLEET_VAR_DIR", BASE_DIR / "var"))

# Debug pages only where asked for (./demo.sh sets DJANGO_DEBUG=true): they show settings,
# the broker URL and the caller's request headers to whoever makes a request fail.
DEBUG = env_bool("DJANGO_DEBUG", False)
# Public values, so never a production key: the webhook secrets' encryption key is derived
# from SECRET_KEY (crypto.py) unless CRONFLEET_ENCRYPTION_KEYS is set.
DEVELOPMENT_SECRET_KEY = "insecure-development-key-do-not-use-in-production"
PLACEHOLDER_SECRET_KEYS = {DEVELOPMENT_SECRET_KEY, "change-me"}
SECRET_KEY = env_str("DJANGO_SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured(
            "DJANGO_SECRET_KEY must be set (DJANGO_DEBUG=true, for local development "
            "only, uses a public development key)"
        )
    SECRET_KEY = DEVELOPMENT_SECRET_KEY
elif not DEBUG and (SECRET_KEY in PLACEHOLDER_SECRET_KEYS or len(SECRET_KEY) < 32):
    raise ImproperlyConfigured(
        "DJANGO_SECRET_KEY must be a random value of at least 32 characters, not a "
        "placeholder (python -c 'import secrets; print(secrets.token_urlsafe(50))')"
    )
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
# The one public host name clients use (cron.example.com): answered besides DJANGO_ALLOWED_HOSTS,
# and its https:// origin is trusted for admin forms (docker-compose.yml requires it; the
# Caddy profile gets its certificate for it).
CRONFLEET_HOST = env_str("CRONFLEET_HOST", "").strip()
if CRONFLEET_HOST:
    if not re.fullmatch(r"[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?", CRONFLEET_HOST):
        raise ImproperlyConfigured(
            f"CRONFLEET_HOST must be a host name such as cron.example.com (no scheme, "
            f"port or path), got {CRONFLEET_HOST!r}"
        )
    if CRONFLEET_HOST not in ALLOWED_HOSTS:
        ALLOWED_HOSTS = [*ALLOWED_HOSTS, CRONFLEET_HOST]

# --- Behind TLS (docs/operating-tls.md) -------------------------------------------------------
# Origins (scheme://host[:port]) whose forms the admin accepts besides its own host; a TLS proxy
# that talks plain HTTP to gunicorn needs its public https:// origin here, or every admin POST
# is refused as a CSRF failure.
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS", [])
if CRONFLEET_HOST and f"https://{CRONFLEET_HOST}" not in CSRF_TRUSTED_ORIGINS:
    CSRF_TRUSTED_ORIGINS = [*CSRF_TRUSTED_ORIGINS, f"https://{CRONFLEET_HOST}"]
for _origin in CSRF_TRUSTED_ORIGINS:
    if not re.fullmatch(r"https?://[^/\s?#]+", _origin):
        raise ImproperlyConfigured(
            f"DJANGO_CSRF_TRUSTED_ORIGINS: {_origin!r} must be an origin such as "
            "https://cron.example.com (a scheme, a host, no path)"
        )
# Opt-in: the header the proxy sets to "https" on requests that came in over TLS, e.g.
# "X-Forwarded-Proto" (or "X-Forwarded-Proto: https"). Only behind a proxy that always sets or
# strips it: a client could otherwise claim HTTPS. Unset: request.is_secure() is TLS to gunicorn.
_proxy_header = env_str("DJANGO_SECURE_PROXY_SSL_HEADER", "")
if _proxy_header:
    _header_match = re.fullmatch(r"\s*([A-Za-z0-9-]+)\s*(?::\s*(\S+)\s*)?", _proxy_header)
    if not _header_match:
        raise ImproperlyConfigured(
            "DJANGO_SECURE_PROXY_SSL_HEADER must be a header name, optionally with the "
            f"value meaning HTTPS (X-Forwarded-Proto: https), got {_proxy_header!r}"
        )
    SECURE_PROXY_SSL_HEADER = ("HTTP_" + _header_match[1].upper().replace("-", "_"), _header_match[2] or "https")
# Cookies the browser sends only over HTTPS (the session's and the CSRF token's). Off by
# default so that the first run over http://localhost keeps its admin session.
SESSION_COOKIE_SECURE = env_bool("DJANGO_SESSION_COOKIE_SECURE", False)
CSRF_COOKIE_SECURE = env_bool("DJANGO_CSRF_COOKIE_SECURE", False)
# Strict-Transport-Security on HTTPS answers, this many seconds (0: not sent). Browsers then
# refuse plain HTTP to this host for that long: start small (300) and raise it once TLS works.
SECURE_HSTS_SECONDS = env_int("DJANGO_SECURE_HSTS_SECONDS", 0, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = env_bool("DJANGO_SECURE_HSTS_PRELOAD", False)

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_celery_results",
    "django_celery_beat",  # its tables, for manage.py import_beat
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "scheduler_app",
]

MIDDLEWARE = [
    # First: it sees every answer under /api/, including those Django makes from exceptions.
    "scheduler_app.api.middleware.ApiErrorMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # Static files (the admin's, the API docs') from the web process itself, debug or not.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "project.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

WSGI_APPLICATION = "project.wsgi.application"

# --- Database (project/databases.py) ----------------------------------------------------
DATABASE_URL = env_str("DATABASE_URL", f"sqlite:///{VAR_DIR / 'cronfleet.sqlite3'}")
PG_TCP_BOUNDS = databases.tcp_bounds()
DATABASES = {"default": databases.default_database(DATABASE_URL, PG_TCP_BOUNDS)}
_sql_databases = databases.sql_databases(PG_TCP_BOUNDS)
DATABASES.update(_sql_databases)
CRONFLEET_SQL_DATABASE_ALIASES = tuple(_sql_databases)
DATABASE_ROUTERS = ["scheduler_app.targets.sql.SqlDatabasesRouter"]

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
# Instants with seconds and their zone ("2024-01-01 18:33:05 UTC"), not "6:33 p.m.".
FORMAT_MODULE_PATH = ["scheduler_app.formats"]

STATIC_URL = "static/"
# `manage.py collectstatic` fills it (the Dockerfile does at build time); WhiteNoise serves it.
STATIC_ROOT = VAR_DIR / "static"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    # Gzip copies made by collectstatic; no manifest, so nothing breaks before collectstatic runs.
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # WhiteNoise warns at every start without it

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {
        "scheduler_app": {"handlers": ["console"], "level": env_str("CRONFLEET_LOG_LEVEL", "INFO")},
    },
}
# CRONFLEET_LOG_FORMAT=json: one JSON object per line (scheduler_app/observability/logformat.py), from every
# logger of the process: the root logger writes them, ours included (at their own level).
CRONFLEET_LOG_FORMAT = env_str("CRONFLEET_LOG_FORMAT", "plain").lower()
if CRONFLEET_LOG_FORMAT not in {"plain", "json"}:
    raise ImproperlyConfigured(f"CRONFLEET_LOG_FORMAT must be plain or json, got {CRONFLEET_LOG_FORMAT!r}")
if CRONFLEET_LOG_FORMAT == "json":
    LOGGING["formatters"]["json"] = {"()": "scheduler_app.observability.logformat.JsonFormatter"}
    LOGGING["handlers"]["console"]["formatter"] = "json"
    LOGGING["root"] = {"handlers": ["console"], "level": "WARNING"}
    LOGGING["loggers"]["scheduler_app"] = {"level": env_str("CRONFLEET_LOG_LEVEL", "INFO")}

# --- Celery ---------------------------------------------------------------------------
# The default broker is kombu's filesystem transport: no server to install, shared by the
# processes of one machine. Use Redis (redis://) or RabbitMQ (amqp://) for anything real.
BROKER_DIR = VAR_DIR / "broker"
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", "filesystem://")
if CELERY_BROKER_URL.startswith("filesystem://"):
    BROKER_DIR.mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT = "scheduler_app.fsbroker:Transport"  # messages written whole
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(BROKER_DIR),
        "data_folder_out": str(BROKER_DIR),
        "control_folder": str(BROKER_DIR / "control"),
        # kombu polls the folder; its default of 1 s caps a worker at a few runs a second.
        "polling_interval": 0.1,
    }
    (BROKER_DIR / "control").mkdir(exist_ok=True)
else:
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "visibility_timeout": env_int("CELERY_VISIBILITY_TIMEOUT", 7200, minimum=60),
        # Redis: one list per message priority (0-9) instead of kombu's four buckets, so each
        # of a job's ten priorities is its own step. Other transports ignore it.
        "priority_steps": list(range(10)),
    }
# Redis Sentinel (docs/operating.md: Redis Sentinel): CELERY_BROKER_URL (or
# CRONFLEET_RATE_LIMIT_REDIS_URL) as sentinel://host:port;sentinel://host2:port2 (the database
# number on the first address), and the name of the master the Sentinels monitor. Each question
# to a Sentinel, and each connection attempt to a master, waits at most
# CRONFLEET_SENTINEL_TIMEOUT_SECONDS: it bounds how long a process spends on a Sentinel or a
# master that is gone before it asks the next Sentinel for the new master.
CRONFLEET_SENTINEL_MASTER = env_str("CRONFLEET_SENTINEL_MASTER", "")
CRONFLEET_SENTINEL_TIMEOUT_SECONDS = env_float("CRONFLEET_SENTINEL_TIMEOUT_SECONDS", 2.0, minimum=0.1)


def _check_sentinel_url(name: str, url: str) -> None:
    # The parser the Redis clients use (no Django import at its top), so both read one form.
    from scheduler_app.redisclient import BadSentinelUrl, is_sentinel, parse_sentinel_url

    if not is_sentinel(url):
        return
    try:
        parse_sentinel_url(url)
    except BadSentinelUrl as exc:
        raise ImproperlyConfigured(f"{name}: {exc}") from None
    if not CRONFLEET_SENTINEL_MASTER:
        raise ImproperlyConfigured(
            f"{name} is a sentinel:// URL: set CRONFLEET_SENTINEL_MASTER to the name of the "
            "master the Sentinels monitor (their `sentinel monitor <name> ...`)"
        )


_check_sentinel_url("CELERY_BROKER_URL", CELERY_BROKER_URL)
if CELERY_BROKER_URL.startswith("sentinel://"):
    _sentinel_timeouts = {
        "socket_timeout": CRONFLEET_SENTINEL_TIMEOUT_SECONDS,
        "socket_connect_timeout": CRONFLEET_SENTINEL_TIMEOUT_SECONDS,
    }
    CELERY_BROKER_TRANSPORT_OPTIONS.update(
        master_name=CRONFLEET_SENTINEL_MASTER,
        sentinel_kwargs=_sentinel_timeouts,  # asking a Sentinel for the master
        # connecting to the master; replies are not bounded here (a worker's BRPOP waits by design)
        socket_connect_timeout=CRONFLEET_SENTINEL_TIMEOUT_SECONDS,
    )
# RabbitMQ (docs/operating.md: RabbitMQ): task queues are durable and messages persistent.
# CRONFLEET_RABBITMQ_QUEUE_TYPE=quorum declares them as quorum queues (replicated over the
# cluster's nodes) instead of classic ones. A classic queue is a priority queue of ten levels
# (0-9, Job.priority); RabbitMQ 3 refuses x-max-priority on a quorum queue, so there it is
# left out. Beats (queues.task_queue) and workers (Celery's queues for -Q, from these
# settings) declare a queue alike; a queue made earlier with other arguments (another type,
# or no x-max-priority) must be deleted once, or RabbitMQ refuses the declaration.
CRONFLEET_RABBITMQ_QUEUE_TYPE = env_str("CRONFLEET_RABBITMQ_QUEUE_TYPE", "classic").lower()
CELERY_TASK_DEFAULT_QUEUE_TYPE = CRONFLEET_RABBITMQ_QUEUE_TYPE
CELERY_TASK_CREATE_MISSING_QUEUE_TYPE = CRONFLEET_RABBITMQ_QUEUE_TYPE  # a worker's -Q queues
CELERY_TASK_QUEUE_MAX_PRIORITY = 9 if CRONFLEET_RABBITMQ_QUEUE_TYPE == "classic" else None
CRONFLEET_QUEUE_MAX_PRIORITY = CELERY_TASK_QUEUE_MAX_PRIORITY
# Publisher confirms: the beat's publishes (dispatch/publish.py) wait for the node to confirm
# each batch it sent, so a message the node refused (basic.nack: a full queue with
# x-overflow=reject-publish) or did not confirm in time (it died first, a quorum queue without
# its majority) raises there and its runs stay queued for the republish sweep, instead of
# being dropped unseen. One wait a batch, not a round trip a message (docs/benchmarks.md has
# the cost). Only for an amqp:// broker; other transports ignore it.
CRONFLEET_RABBITMQ_CONFIRM_PUBLISH = env_bool("CRONFLEET_RABBITMQ_CONFIRM_PUBLISH", True)
# django-celery-results' `django-db`, which logs a result it cannot write instead of raising:
# the run's row in the ledger is the truth (worker/results.py).
CELERY_RESULT_BACKEND = "scheduler_app.worker.resultbackend:LedgerFirstBackend"
CELERY_RESULT_EXTENDED = True
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
# execute_run raises after recording a failed attempt (so Flower shows it failed): its message
# must then be acknowledged, never redelivered (the beat retries from the run row).
CELERY_TASK_ACKS_ON_FAILURE_OR_TIMEOUT = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Cronfleet's queue (its runs' default) is also this deployment's Celery default queue.
CRONFLEET_QUEUE = env_str("CRONFLEET_DEFAULT_QUEUE", "cronfleet")
CELERY_TASK_DEFAULT_QUEUE = CRONFLEET_QUEUE
# The broker queues jobs may name (comma-separated; empty: any name scheduler_app.queues
# accepts). Blank on a job means CELERY_TASK_DEFAULT_QUEUE, which is always allowed.
CRONFLEET_QUEUES = env_list("CRONFLEET_QUEUES", [])
CELERY_TASK_SEND_SENT_EVENT = False
CELERY_WORKER_SEND_TASK_EVENTS = env_bool("CELERY_WORKER_SEND_TASK_EVENTS", True)
# The worker's task events go to the broker in batches, at most this many seconds after
# they happen (scheduler_app/worker/events.py); 0: each on the event loop's next turn, as
# Celery sends them.
CELERY_WORKER_CONSUMER = "scheduler_app.worker.events:Consumer"
CRONFLEET_EVENT_FLUSH_SECONDS = env_float("CRONFLEET_EVENT_FLUSH_SECONDS", 0.1, minimum=0.0)
CELERY_TIMEZONE = "UTC"
CELERY_ENABLE_UTC = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Celery's Django fixup closes every database connection before and after each task unless
# this is set; a worker then connects to PostgreSQL once per run (a quarter of its time).
# Keep the connection (tasks.drop_broken_connections closes one that saw an error, and
# worker/reconnect.py one the server closed while it sat idle).
CELERY_DB_REUSE_MAX = env_int("CELERY_DB_REUSE_MAX", 1_000_000, minimum=0)
# The worker's statements (a run's start, end and lease renewal) go out as named prepared
# statements, planned once per connection: planning the start anew each time cost about as
# much as running it. Turn off behind a connection pooler in transaction mode that does not
# carry prepared statements from one server connection to another (PgBouncer before 1.21).
CRONFLEET_PREPARED_STATEMENTS = env_bool("CRONFLEET_PREPARED_STATEMENTS", True)
# How the statement that ends a run commits (synchronous_commit for that transaction only).
# A run's start is always durable: it is the claim that keeps an attempt from running twice.
# Its end may be asynchronous ("off": the commit returns before it reaches disk, 0.2-0.4 ms
# instead of about 3 ms on a loaded 2-core machine): a PostgreSQL *crash* (not a clean
# restart, not a worker's death) can then forget the last fraction of a second of ends;
# those runs are still running with their lease, so they are marked lost and run again as
# their next attempt, under the same fire key. "on": every end durable.
CRONFLEET_END_SYNCHRONOUS_COMMIT = env_str("CRONFLEET_END_SYNCHRONOUS_COMMIT", "off")

# --- Cronfleet ------------------------------------------------------------------------
# Celery task names a job may call (target kind "task"). Anything else is refused when
# the job is created, not when it fires.
CRONFLEET_ALLOWED_TASKS = env_list(
    "CRONFLEET_ALLOWED_TASKS", ["scheduler_app.echo", "scheduler_app.fail", "scheduler_app.sleep"]
)
# Schedules as code (docs/schedules-as-code.md): the TOML file `manage.py schedules` reads
# (besides each app's schedules.py), and whether managed jobs refuse edits made elsewhere.
CRONFLEET_SCHEDULES_FILE = env_str("CRONFLEET_SCHEDULES_FILE", "")
CRONFLEET_SCHEDULES_MAX_FILE_BYTES = env_int("CRONFLEET_SCHEDULES_MAX_FILE_BYTES", 8 * 1024 * 1024, minimum=1024)
CRONFLEET_MANAGED_JOBS_READ_ONLY = env_bool("CRONFLEET_MANAGED_JOBS_READ_ONLY", False)
# How many due jobs one beat claims per transaction.
CRONFLEET_BATCH_SIZE = env_int("CRONFLEET_BATCH_SIZE", 1000, minimum=1)
# A beat that has advanced this many jobs since its last VACUUM of the job table starts
# another on a thread of its own (PostgreSQL; dispatch.vacuum): an advance is never a HOT
# update, and the dead entries it leaves slow the next claims down. 0: leave it to autovacuum.
CRONFLEET_JOB_VACUUM_EVERY = env_int("CRONFLEET_JOB_VACUUM_EVERY", 100_000, minimum=0)
# ... and one that has recorded this many runs since its last ANALYZE of the ledger runs
# another (dispatch.vacuum): statistics from before a spike made the recovery steps read
# every queued run on every turn. 0: leave it to autovacuum.
CRONFLEET_LEDGER_ANALYZE_EVERY = env_int("CRONFLEET_LEDGER_ANALYZE_EVERY", 50_000, minimum=0)
# The longest a beat sleeps between turns when nothing is due.
CRONFLEET_MAX_SLEEP_SECONDS = env_int("CRONFLEET_MAX_SLEEP_SECONDS", 5, minimum=1)
# A fire this many seconds late (or less) is on time; later ones follow the job's misfire policy.
CRONFLEET_MISFIRE_GRACE_SECONDS = env_int("CRONFLEET_MISFIRE_GRACE_SECONDS", 60, minimum=0)
# A running run's lease: renewed by its worker's heartbeat every CRONFLEET_HEARTBEAT_SECONDS.
# A run whose lease ran out (its worker died or froze) is marked lost and retried by a beat,
# so this bounds how long a dead worker's run goes unnoticed.
CRONFLEET_LEASE_SECONDS = env_int("CRONFLEET_LEASE_SECONDS", 30, minimum=2)
CRONFLEET_HEARTBEAT_SECONDS = env_int("CRONFLEET_HEARTBEAT_SECONDS", 10, minimum=1)
# A queued run not started this long after it was published is published again (the broker
# lost it, or its beat died between commit and publish). When the broker's queue is empty the
# shorter CRONFLEET_REPUBLISH_IDLE_SECONDS applies: nothing is waiting ahead of the run.
CRONFLEET_DISPATCH_TIMEOUT_SECONDS = env_int("CRONFLEET_DISPATCH_TIMEOUT_SECONDS", 300, minimum=1)
CRONFLEET_REPUBLISH_IDLE_SECONDS = env_int("CRONFLEET_REPUBLISH_IDLE_SECONDS", 15, minimum=1)
# A queue no live worker consumes (by the workers' node heartbeats) gets no copies: its runs
# wait in the broker as they are. Its queued runs published this long ago, once no worker
# consuming it has been seen for this long either, are skipped with reason no_consumer. 0: never.
CRONFLEET_UNCONSUMED_EXPIRE_SECONDS = env_int("CRONFLEET_UNCONSUMED_EXPIRE_SECONDS", 3600, minimum=0)
# Backpressure: a beat claims no new fires for a broker queue already holding this many
# messages; they wait in the database, due and in the fair order, until workers drain the
# queue, so a tenant's spike cannot bury the next tenant's fires at the workers. 0: off.
CRONFLEET_QUEUE_HIGH_WATER = env_int("CRONFLEET_QUEUE_HIGH_WATER", 5000, minimum=0)
# Manual runs (triggers, backfills): at most this many of one tenant's are queued or running
# at once; the rest wait as pending and the beat releases them as they finish, so one
# tenant's backfill cannot bury the other tenants' fires (docs/fairness.md).
CRONFLEET_MANUAL_RUNS_IN_FLIGHT = env_int("CRONFLEET_MANUAL_RUNS_IN_FLIGHT", 100, minimum=1)
# Manual runs (triggers, replays, backfilled fires) one tenant may record per hour; more are
# refused (403 in the API) and nothing is recorded. 0: unbounded.
CRONFLEET_MANUAL_RUNS_PER_HOUR = env_int("CRONFLEET_MANUAL_RUNS_PER_HOUR", 1000, minimum=0)
# Batched runs (Job.batch, or every job of a queue in CRONFLEET_BATCH_QUEUES): the beat puts
# up to this many runs of one queue and target kind in one message.
CRONFLEET_RUN_BATCH_SIZE = env_int("CRONFLEET_RUN_BATCH_SIZE", 100, minimum=1)
CRONFLEET_BATCH_QUEUES = env_list("CRONFLEET_BATCH_QUEUES", [])
# A batched job's timeout may be at most this (a batch's time limit is the sum of its runs').
CRONFLEET_BATCH_MAX_TIMEOUT_SECONDS = env_int("CRONFLEET_BATCH_MAX_TIMEOUT_SECONDS", 60, minimum=1)
# The longest timeout a job may ask for. Its run's hard time limit (timeout + 30 s) must stay
# below the Redis visibility timeout, or Redis hands a message whose worker is still busy to
# another worker; a RabbitMQ consumer_timeout must in turn exceed the hard limit.
CRONFLEET_MAX_JOB_TIMEOUT_SECONDS = env_int("CRONFLEET_MAX_JOB_TIMEOUT_SECONDS", 3600, minimum=1)
# Programs command jobs may run: name -> {"executable": absolute path, "argv": template,
# "params": {name: {"type": ...}}} (see scheduler_app/targets/command/running.py). JSON in the variable.
CRONFLEET_COMMANDS = env_json_object("CRONFLEET_COMMANDS", "command names")
# Each command run gets a private directory of its own in this one (its working directory,
# TMPDIR and HOME; removed after the run). With CRONFLEET_COMMAND_USER the directory must not
# be writable by that user, and it and its parents must be searchable by it.
CRONFLEET_COMMAND_CWD = env_str("CRONFLEET_COMMAND_CWD", str(VAR_DIR / "command-runs"))
# The unprivileged user command jobs run as (the worker needs root to switch; it refuses to
# start if it cannot). Empty: as the worker's own user, which only the worker's non-dumpable
# flag keeps from its memory and environment (docs/targets-command.md).
CRONFLEET_COMMAND_USER = env_str("CRONFLEET_COMMAND_USER", "")
# The most a command run may hold in its directory (every file counted at a block at least);
# a run that holds more is stopped. Each file is also capped at 64 MiB.
CRONFLEET_COMMAND_MAX_DISK_BYTES = env_int("CRONFLEET_COMMAND_MAX_DISK_BYTES", 256 * 1024 * 1024, minimum=4096)
# Statements SQL jobs may run: name -> {"database": alias, "sql": "... %(param)s ...",
# "params": {name: {"type": ...}}, "read_only", "timeout", "max_rows", "isolation"} (see
# the scheduler_app.targets.sql package). JSON in the variable; checked at start-up against DATABASES.
CRONFLEET_SQL = env_json_object("CRONFLEET_SQL", "statement names")
# Networks HTTP jobs may reach although they are private or loopback (development and tests
# only, e.g. "127.0.0.0/8"). Empty in production: every private address is refused.
CRONFLEET_HTTP_ALLOWED_NETWORKS = env_list("CRONFLEET_HTTP_ALLOWED_NETWORKS", [])
CRONFLEET_HTTP_MAX_RESPONSE_BYTES = env_int("CRONFLEET_HTTP_MAX_RESPONSE_BYTES", 65536, minimum=1024)
# HTTP attempts a worker process keeps in flight at once (worker/flight.py), and at most
# this many to one host (a freed slot goes to the waiting host with the fewest in flight).
# 0: each HTTP run is called in turn by its pool process, as any other target.
CRONFLEET_HTTP_IN_FLIGHT = env_int("CRONFLEET_HTTP_IN_FLIGHT", 1000, minimum=0)
CRONFLEET_HTTP_IN_FLIGHT_PER_HOST = env_int(
    "CRONFLEET_HTTP_IN_FLIGHT_PER_HOST", max(1, CRONFLEET_HTTP_IN_FLIGHT // 2), minimum=1
)
# Fernet keys that encrypt tenants' webhook secrets at rest, newest first (see crypto.py);
# empty: one key derived from DJANGO_SECRET_KEY.
CRONFLEET_ENCRYPTION_KEYS = env_list("CRONFLEET_ENCRYPTION_KEYS", [])
# Bytes of a run's result and error kept in the ledger.
CRONFLEET_RESULT_MAX_BYTES = env_int("CRONFLEET_RESULT_MAX_BYTES", 8192, minimum=256)
# Retention (scheduler_app/ledger/retention.py): finished runs are kept this many days after they
# finished, failed and dead ones at least CRONFLEET_RETENTION_FAILED_DAYS, and a job's newest
# CRONFLEET_RETENTION_KEEP_LAST runs whatever their age; older ones are deleted in the
# background by the beats and by `manage.py prune_runs`. Tenants and jobs may set their own
# (API, CLI `retention`, admin). 0 days: kept forever; 0 runs: no such floor.
CRONFLEET_RETENTION_DAYS = env_int("CRONFLEET_RETENTION_DAYS", 30, minimum=0)
CRONFLEET_RETENTION_FAILED_DAYS = env_int("CRONFLEET_RETENTION_FAILED_DAYS", 90, minimum=0)
CRONFLEET_RETENTION_KEEP_LAST = env_int("CRONFLEET_RETENTION_KEEP_LAST", 0, minimum=0)
# Audit events about runs (lost leases, replays, duplicate deliveries) are pruned on their own
# age, whether their run is still kept or not; operators' actions on jobs, tenants and keys are
# kept. 0: kept forever.
CRONFLEET_RETENTION_AUDIT_DAYS = env_int("CRONFLEET_RETENTION_AUDIT_DAYS", 365, minimum=0)
# Beats prune in the background: one batch of at most this many runs looked at per loop turn
# while they have time (at least every CRONFLEET_RETENTION_BUSY_SECONDS while dispatch is
# busy); once caught up, they look again every CRONFLEET_RETENTION_CHECK_SECONDS, and walk
# each tenant's history from its start every CRONFLEET_RETENTION_RESCAN_SECONDS (runs kept
# by a job's floor or by a longer policy of their job are looked at again then).
CRONFLEET_RETENTION_IN_BEAT = env_bool("CRONFLEET_RETENTION_IN_BEAT", True)
CRONFLEET_RETENTION_BATCH_SIZE = env_int("CRONFLEET_RETENTION_BATCH_SIZE", 5000, minimum=1)
CRONFLEET_RETENTION_BUSY_SECONDS = env_int("CRONFLEET_RETENTION_BUSY_SECONDS", 10, minimum=1)
CRONFLEET_RETENTION_CHECK_SECONDS = env_int("CRONFLEET_RETENTION_CHECK_SECONDS", 60, minimum=1)
CRONFLEET_RETENTION_RESCAN_SECONDS = env_int("CRONFLEET_RETENTION_RESCAN_SECONDS", 3600, minimum=1)

# Job alerts (scheduler_app/alerts/): each beat evaluates due alert rules at most this often,
# after a turn; its delivery thread sends pending alerts after each check and this often.
CRONFLEET_ALERT_CHECK_SECONDS = env_int("CRONFLEET_ALERT_CHECK_SECONDS", 10, minimum=1)
# How long an alert's webhook may take to answer before the attempt counts as failed.
CRONFLEET_ALERT_DELIVERY_TIMEOUT_SECONDS = env_int("CRONFLEET_ALERT_DELIVERY_TIMEOUT_SECONDS", 5, minimum=1)
# Fair delivery (docs/alerts.md): each beat sends alerts on this many threads, at most
# CRONFLEET_ALERT_DELIVERIES_PER_TENANT of them for one tenant, tenants served in turn, so a
# slow or hanging receiver holds only its own tenant's share.
CRONFLEET_ALERT_DELIVERY_THREADS = env_int("CRONFLEET_ALERT_DELIVERY_THREADS", 8, minimum=1)
CRONFLEET_ALERT_DELIVERIES_PER_TENANT = env_int("CRONFLEET_ALERT_DELIVERIES_PER_TENANT", 2, minimum=1)
# Bounds on what one tenant's rules cost: a rule's cool-down is at least this (shorter ones
# are refused at save; older rules are held to it), at most this many addresses per rule, and
# per tenant per hour at most this many alerts sent and e-mails (one per address) sent; over
# a budget an alert is recorded as suppressed, with the reason, and not sent.
CRONFLEET_ALERT_MIN_COOLDOWN_SECONDS = env_int("CRONFLEET_ALERT_MIN_COOLDOWN_SECONDS", 60, minimum=0)
CRONFLEET_ALERT_MAX_EMAILS_PER_RULE = env_int("CRONFLEET_ALERT_MAX_EMAILS_PER_RULE", 10, minimum=1)
CRONFLEET_ALERT_TENANT_ALERTS_PER_HOUR = env_int("CRONFLEET_ALERT_TENANT_ALERTS_PER_HOUR", 120, minimum=1)
CRONFLEET_ALERT_TENANT_EMAILS_PER_HOUR = env_int("CRONFLEET_ALERT_TENANT_EMAILS_PER_HOUR", 200, minimum=0)
# Time-data impact (docs/time-data.md): how far ahead held fires are checked against the zone and
# holiday data installed, and how many jobs (the soonest due) a beat checks when it starts (0: none).
CRONFLEET_TIME_DATA_HORIZON_DAYS = env_int("CRONFLEET_TIME_DATA_HORIZON_DAYS", 30, minimum=1)
CRONFLEET_TIME_DATA_STARTUP_JOBS = env_int("CRONFLEET_TIME_DATA_STARTUP_JOBS", 10000, minimum=0)
# A bulk pause of more jobs than this waits for a second person's approval (docs/pauses.md).
CRONFLEET_BULK_PAUSE_APPROVAL_OVER = env_int("CRONFLEET_BULK_PAUSE_APPROVAL_OVER", 100, minimum=0)
# E-mailed alerts go through Django's e-mail backend: SMTP at EMAIL_HOST unless
# DJANGO_EMAIL_BACKEND names another (django.core.mail.backends.console.EmailBackend, say).
EMAIL_BACKEND = env_str("DJANGO_EMAIL_BACKEND", "django.core.mail.backends.smtp.EmailBackend")
EMAIL_HOST = env_str("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25, minimum=1)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
EMAIL_TIMEOUT = env_int("EMAIL_TIMEOUT", 10, minimum=1)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "cronfleet@localhost")

# --- REST API (/api/v1/) -----------------------------------------------------------------
# Bearer keys (services.apikey_authenticate) or a logged-in staff session; JSON in and out;
# every error as {"errors": [{"field", "message"}]} (scheduler_app/api/handler.py).
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "scheduler_app.api.auth.BearerKeyAuthentication",
        "scheduler_app.api.auth.StaffSessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["scheduler_app.api.auth.IsApiCaller"],
    "DEFAULT_PARSER_CLASSES": ["scheduler_app.api.parsers.StrictJSONParser"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_THROTTLE_CLASSES": ["scheduler_app.api.throttling.KeyRateThrottle"],
    "DEFAULT_SCHEMA_CLASS": "scheduler_app.api.schema.ApiSchema",
    "EXCEPTION_HANDLER": "scheduler_app.api.handler.handle_exception",
    # No OPTIONS metadata: nothing under /api/v1/ answers a method it does not document.
    "DEFAULT_METADATA_CLASS": None,
    "TEST_REQUEST_DEFAULT_FORMAT": "json",
}
# Cronfleet's own (scheduler_app/api/schema_settings.py, which its schema and docs views use
# whatever a project sets), for `manage.py spectacular`, with this deployment's paths.
SPECTACULAR_SETTINGS = {
    **_cronfleet_schema,
    "SCHEMA_PATH_PREFIX": r"/api/v1",
    "SERVE_INCLUDE_SCHEMA": False,
    # /api/schema/ and /api/docs/ are public: they describe the API, not anyone's data.
    "SERVE_AUTHENTICATION": [],
}
# Request bodies larger than this are refused with 413 before they are read.
CRONFLEET_API_MAX_BODY_BYTES = env_int("CRONFLEET_API_MAX_BODY_BYTES", 256 * 1024, minimum=1024)
# Requests per minute for each API key whose tenant sets no api_requests_per_minute (and for
# staff keys and sessions). Counted in Redis, in fixed one-minute windows (INCR + EXPIRE in
# one transaction), at CRONFLEET_RATE_LIMIT_REDIS_URL, which defaults to the broker when that
# is Redis. Without Redis (the SQLite/filesystem-broker first run) rate limiting is off;
# GET /api/v1/me says so. When Redis is unreachable requests are let through (fail open) with
# a logged warning, /me says the limit is off, and no request asks Redis again: after
# CRONFLEET_RATE_LIMIT_RETRY_SECONDS a background probe does (scheduler_app/api/throttling.py).
# Unrevoked API keys a tenant may hold (staff keys are not counted).
CRONFLEET_MAX_API_KEYS_PER_TENANT = env_int("CRONFLEET_MAX_API_KEYS_PER_TENANT", 20, minimum=1)
CRONFLEET_API_REQUESTS_PER_MINUTE = env_int("CRONFLEET_API_REQUESTS_PER_MINUTE", 600, minimum=1)
# All of a tenant's keys together, so that more keys do not mean more requests: this many a
# minute, or the tenant's per-key limit when that is larger.
CRONFLEET_API_TENANT_REQUESTS_PER_MINUTE = env_int("CRONFLEET_API_TENANT_REQUESTS_PER_MINUTE", 1200, minimum=1)
# Failed authentications (a wrong or revoked key) per client address; past it, 429 until the
# window ends, without a database query. The address is REMOTE_ADDR, or with
# CRONFLEET_TRUSTED_PROXIES reverse proxies in front (each appending to X-Forwarded-For) the
# address the outermost proxy saw. Behind an unlisted proxy every client shares its address.
CRONFLEET_API_FAILED_AUTH_PER_MINUTE = env_int("CRONFLEET_API_FAILED_AUTH_PER_MINUTE", 60, minimum=1)
CRONFLEET_TRUSTED_PROXIES = env_int("CRONFLEET_TRUSTED_PROXIES", 0, minimum=0)
CRONFLEET_RATE_LIMIT_REDIS_URL = env_str(
    "CRONFLEET_RATE_LIMIT_REDIS_URL",
    CELERY_BROKER_URL if CELERY_BROKER_URL.startswith(("redis://", "rediss://", "sentinel://")) else "",
)
_check_sentinel_url("CRONFLEET_RATE_LIMIT_REDIS_URL", CRONFLEET_RATE_LIMIT_REDIS_URL)
CRONFLEET_RATE_LIMIT_RETRY_SECONDS = env_int("CRONFLEET_RATE_LIMIT_RETRY_SECONDS", 5, minimum=1)

# --- Check-ins (docs/check-ins.md) ----------------------------------------------------------
# Monitored jobs ping /ping/<key>: the address shown in their ping URLs (the API's, the CLI's
# and the admin's: where the machines that run them reach Cronfleet), the pings each key may
# send a minute and the pings with an unknown (or malformed) key each client address may send
# a minute (both counted in Redis like the API's limits; off without Redis), and the runs of
# its own (pings that found no open fire) a monitored job records an hour (counted in the
# ledger; 0: pings only close fires).
CRONFLEET_PING_BASE_URL = env_str("CRONFLEET_PING_BASE_URL", "http://localhost:8000").rstrip("/")
CRONFLEET_PING_REQUESTS_PER_MINUTE = env_int("CRONFLEET_PING_REQUESTS_PER_MINUTE", 60, minimum=1)
CRONFLEET_PING_UNKNOWN_PER_MINUTE = env_int("CRONFLEET_PING_UNKNOWN_PER_MINUTE", 60, minimum=1)
CRONFLEET_PING_OWN_RUNS_PER_HOUR = env_int("CRONFLEET_PING_OWN_RUNS_PER_HOUR", 60, minimum=0)

# --- Cells (docs/scaling.md: Routing) -------------------------------------------------------
# The name of this cell where a deployment is several: API keys made here read
# cf_<cell>_<prefix>_<secret> and ping URLs /ping/<cell>/<key>, so a routing proxy sends each
# request to its cell without a lookup. Empty (one Cronfleet): cf_<prefix>_<secret>, /ping/<key>.
CRONFLEET_CELL = env_str("CRONFLEET_CELL", "").strip()


def _check_cell() -> None:
    from scheduler_app.cells import check_cell  # no Django import at its top

    if problem := check_cell(CRONFLEET_CELL):
        raise ImproperlyConfigured(f"CRONFLEET_CELL {problem}")


_check_cell()
# A key the cells share (at least 32 characters): `tenants export` seals the document with a
# MAC under it, and `tenants import` refuses a document without one, or changed since.
CRONFLEET_TENANT_DOCUMENT_KEY = env_str("CRONFLEET_TENANT_DOCUMENT_KEY", "")

# --- Observability (docs/operating.md: Monitoring) ------------------------------------------
# Count finished runs per tenant too (cronfleet_tenant_runs_finished_total): one series per
# tenant and state, so only where tenants are few enough for Prometheus.
CRONFLEET_METRICS_TENANT_LABELS = env_bool("CRONFLEET_METRICS_TENANT_LABELS", False)
# Where `runbeat --metrics-port` and `celery worker --metrics-port` listen.
CRONFLEET_METRICS_ADDRESS = env_str("CRONFLEET_METRICS_ADDRESS", "0.0.0.0")
# When set, the web's /metrics answers only `Authorization: Bearer <this>` (Prometheus's
# `authorization: {credentials: ...}`); empty: open, like /healthz.
CRONFLEET_METRICS_TOKEN = env_str("CRONFLEET_METRICS_TOKEN", "")
# The autoscaling forecast on /metrics (scheduler_app/observability/forecast.py,
# docs/autoscaling.md): the start lag its recommended workers aim at, the runs one worker
# runs at once, the duration of a job with no finished runs in a queue with none either,
# and how long one computation serves later scrapes (0: every scrape computes it).
CRONFLEET_FORECAST_TARGET_LAG_SECONDS = env_float("CRONFLEET_FORECAST_TARGET_LAG_SECONDS", 30.0, minimum=0.0)
CRONFLEET_FORECAST_WORKER_CONCURRENCY = env_int("CRONFLEET_FORECAST_WORKER_CONCURRENCY", 8, minimum=1)
CRONFLEET_FORECAST_DEFAULT_SECONDS = env_float("CRONFLEET_FORECAST_DEFAULT_SECONDS", 1.0, minimum=0.0)
CRONFLEET_FORECAST_CACHE_SECONDS = env_float("CRONFLEET_FORECAST_CACHE_SECONDS", 5.0, minimum=0.0)

# --- Admin login throttle (scheduler_app/admin/login.py) -------------------------------------
# After this many failed logins for one username from one address (CRONFLEET_TRUSTED_PROXIES
# decides the address, as for the API) within the window, its logins are refused, the right
# password too, until the oldest of those failures is a window old. Counted in Redis at
# CRONFLEET_RATE_LIMIT_REDIS_URL, shared by every web process; without it, in each process.
CRONFLEET_ADMIN_LOGIN_FAILURES = env_int("CRONFLEET_ADMIN_LOGIN_FAILURES", 10, minimum=1)
CRONFLEET_ADMIN_LOGIN_WINDOW_SECONDS = env_int("CRONFLEET_ADMIN_LOGIN_WINDOW_SECONDS", 900, minimum=1)


# --- The checks between settings (scheduler_app/conf.py; a host project gets them as system checks)
def _check_between() -> None:
    from scheduler_app.conf import PREFIX, problems  # here, as the other checks above import theirs

    values = {name.removeprefix(PREFIX): value for name, value in globals().items() if name.startswith(PREFIX)}
    values["VISIBILITY_TIMEOUT"] = CELERY_BROKER_TRANSPORT_OPTIONS.get("visibility_timeout")
    for name, message in problems(values)[:1]:
        raise ImproperlyConfigured(f"{name} {message}")


_check_between()
