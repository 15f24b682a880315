"""Settings read from the environment fail loudly, naming the variable."""

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT, environment_with, process_env


def check_settings(*, script: str = "", **env: str) -> subprocess.CompletedProcess:
    """Load the project's settings in a fresh process with `env` over this one's (whose test
    settings set DJANGO_SECRET_KEY: pass "" to unset it), then run `script`."""
    environment = {**os.environ, "DJANGO_SETTINGS_MODULE": "project.settings", **env}
    return subprocess.run(
        [sys.executable, "-c", "import django; django.setup()\n" + script],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"CRONFLEET_BATCH_SIZE": "many"}, "CRONFLEET_BATCH_SIZE must be an integer, got 'many'"),
        ({"CRONFLEET_BATCH_SIZE": "0"}, "CRONFLEET_BATCH_SIZE must be at least 1"),
        ({"CRONFLEET_EVENT_FLUSH_SECONDS": "soon"}, "CRONFLEET_EVENT_FLUSH_SECONDS must be a number, got 'soon'"),
        ({"CRONFLEET_EVENT_FLUSH_SECONDS": "nan"}, "CRONFLEET_EVENT_FLUSH_SECONDS must be a number, got 'nan'"),
        ({"CRONFLEET_EVENT_FLUSH_SECONDS": "-1"}, "CRONFLEET_EVENT_FLUSH_SECONDS must be at least 0.0"),
        ({"DJANGO_DEBUG": "perhaps"}, "DJANGO_DEBUG must be a boolean"),
        ({"DJANGO_DEBUG": "false", "DJANGO_SECRET_KEY": ""}, "DJANGO_SECRET_KEY must be set"),
        # Debug is off unless asked for, so production cannot start on the public development key ...
        ({"DJANGO_DEBUG": "", "DJANGO_SECRET_KEY": ""}, "DJANGO_SECRET_KEY must be set"),
        # ... nor on .env.example's placeholder or the development key named outright.
        ({"DJANGO_SECRET_KEY": "change-me"}, "DJANGO_SECRET_KEY must be a random value of at least 32"),
        ({"DJANGO_SECRET_KEY": "insecure-development-key-do-not-use-in-production"}, "not a placeholder"),
        ({"DJANGO_SECRET_KEY": "short"}, "DJANGO_SECRET_KEY must be a random value of at least 32"),
        (
            {"DATABASE_URL": "postgres://u@127.0.0.1:5432/x", "DB_POOL_MAX_SIZE": "2", "DB_POOL_MIN_SIZE": "3"},
            "DB_POOL_MIN_SIZE (3) must not exceed DB_POOL_MAX_SIZE (2)",
        ),
        ({"DB_POOL_MAX_SIZE": "-1"}, "DB_POOL_MAX_SIZE must be at least 0"),
        ({"CRONFLEET_API_FAILED_AUTH_PER_MINUTE": "0"}, "CRONFLEET_API_FAILED_AUTH_PER_MINUTE must be at least 1"),
        ({"CRONFLEET_LEASE_SECONDS": "10", "CRONFLEET_HEARTBEAT_SECONDS": "6"}, "CRONFLEET_HEARTBEAT_SECONDS must be"),
        (
            {
                "CELERY_BROKER_URL": "redis://127.0.0.1:6379/15",
                "CELERY_VISIBILITY_TIMEOUT": "600",
                "CRONFLEET_MAX_JOB_TIMEOUT_SECONDS": "600",
            },
            "CRONFLEET_MAX_JOB_TIMEOUT_SECONDS + 30 (630) must stay below the broker's visibility timeout (600)",
        ),
        # Behind TLS (docs/operating-tls.md)
        ({"DJANGO_CSRF_TRUSTED_ORIGINS": "cron.example.com"}, "DJANGO_CSRF_TRUSTED_ORIGINS: 'cron.example.com' must"),
        (
            {"DJANGO_CSRF_TRUSTED_ORIGINS": "https://a.example.com,https://b.example.com/admin/"},
            "DJANGO_CSRF_TRUSTED_ORIGINS: 'https://b.example.com/admin/' must be an origin",
        ),
        ({"DJANGO_SECURE_PROXY_SSL_HEADER": "X_Forwarded Proto"}, "DJANGO_SECURE_PROXY_SSL_HEADER must be a header"),
        ({"DJANGO_SESSION_COOKIE_SECURE": "always"}, "DJANGO_SESSION_COOKIE_SECURE must be a boolean"),
        ({"DJANGO_CSRF_COOKIE_SECURE": "2"}, "DJANGO_CSRF_COOKIE_SECURE must be a boolean"),
        ({"DJANGO_SECURE_HSTS_SECONDS": "a year"}, "DJANGO_SECURE_HSTS_SECONDS must be an integer, got 'a year'"),
        ({"DJANGO_SECURE_HSTS_SECONDS": "-1"}, "DJANGO_SECURE_HSTS_SECONDS must be at least 0"),
        ({"CRONFLEET_HOST": "https://cron.example.com"}, "CRONFLEET_HOST must be a host name"),
        ({"CRONFLEET_HOST": "cron.example.com/admin"}, "CRONFLEET_HOST must be a host name"),
        ({"CRONFLEET_ADMIN_LOGIN_FAILURES": "0"}, "CRONFLEET_ADMIN_LOGIN_FAILURES must be at least 1"),
        ({"CRONFLEET_ADMIN_LOGIN_WINDOW_SECONDS": "soon"}, "CRONFLEET_ADMIN_LOGIN_WINDOW_SECONDS must be an integer"),
        ({"CRONFLEET_CELL": "EU-1"}, "CRONFLEET_CELL must be a lowercase letter then up to 15"),
        ({"CRONFLEET_CELL": "1eu"}, "CRONFLEET_CELL must be a lowercase letter then up to 15"),
    ],
)
def test_bad_settings_stop_start_up_naming_the_variable(env, message):
    done = check_settings(**env)

    assert done.returncode != 0
    assert "ImproperlyConfigured" in done.stderr and message in done.stderr


TLS_SCRIPT = """
from django.conf import settings
print(settings.CSRF_TRUSTED_ORIGINS, getattr(settings, "SECURE_PROXY_SSL_HEADER", None),
      settings.SESSION_COOKIE_SECURE, settings.CSRF_COOKIE_SECURE, settings.SECURE_HSTS_SECONDS)
"""


@pytest.mark.parametrize(
    ("env", "printed"),
    [
        ({}, "[] None False False 0"),
        (
            {
                "DJANGO_CSRF_TRUSTED_ORIGINS": "https://cron.example.com, https://*.example.org",
                "DJANGO_SECURE_PROXY_SSL_HEADER": "X-Forwarded-Proto",
                "DJANGO_SESSION_COOKIE_SECURE": "true",
                "DJANGO_CSRF_COOKIE_SECURE": "yes",
                "DJANGO_SECURE_HSTS_SECONDS": "300",
            },
            "['https://cron.example.com', 'https://*.example.org'] ('HTTP_X_FORWARDED_PROTO', 'https') True True 300",
        ),
        ({"DJANGO_SECURE_PROXY_SSL_HEADER": "X-Forwarded-Ssl: on"}, "[] ('HTTP_X_FORWARDED_SSL', 'on') False False 0"),
    ],
)
def test_the_tls_settings_come_from_the_environment(tmp_path, env, printed):
    blank = {
        name: ""
        for name in (
            "DJANGO_CSRF_TRUSTED_ORIGINS",
            "DJANGO_SECURE_PROXY_SSL_HEADER",
            "DJANGO_SESSION_COOKIE_SECURE",
            "DJANGO_CSRF_COOKIE_SECURE",
            "DJANGO_SECURE_HSTS_SECONDS",
        )
    }
    done = check_settings(CRONFLEET_VAR_DIR=str(tmp_path), script=TLS_SCRIPT, **{**blank, **env})

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == printed


def test_debug_is_off_unless_asked_for(tmp_path):
    done = check_settings(
        CRONFLEET_VAR_DIR=str(tmp_path),
        DJANGO_DEBUG="",
        script="from django.conf import settings; print(settings.DEBUG)",
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_the_demo_starts_without_any_environment_but_debug(tmp_path):
    done = check_settings(
        CRONFLEET_VAR_DIR=str(tmp_path),
        DATABASE_URL="",
        CELERY_BROKER_URL="",
        DJANGO_SECRET_KEY="",
        DJANGO_DEBUG="true",
    )

    assert done.returncode == 0, done.stderr


POOL_SCRIPT = """
from django.db import connection
db = connection.settings_dict
print(db["CONN_MAX_AGE"], db["OPTIONS"].get("pool"))
with connection.cursor() as cursor:
    cursor.execute("SELECT 1")
connection.close()
print("pooled" if connection.pool is not None and connection.pool.get_stats()["pool_size"] >= 1 else "direct")
"""


def test_a_pool_size_gives_the_process_a_pool_instead_of_persistent_connections(db):
    # DB_CONN_MAX_AGE, shared with beats and workers through .env, does not stop the web process.
    done = check_settings(
        DATABASE_URL=process_env()["DATABASE_URL"], DB_POOL_MAX_SIZE="3", DB_CONN_MAX_AGE="60", script=POOL_SCRIPT
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "0 {'min_size': 1, 'max_size': 3, 'timeout': 10, 'name': 'cronfleet-web'}",
        "pooled",
    ]


def test_without_a_pool_size_connections_persist_as_before(db):
    done = check_settings(
        DATABASE_URL=process_env()["DATABASE_URL"], DB_POOL_MAX_SIZE="", DB_CONN_MAX_AGE="", script=POOL_SCRIPT
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["60 None", "direct"]


def celery_or_wsgi(code: str, **env: str | None) -> subprocess.CompletedProcess:
    environment = environment_with(**env)
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=environment, capture_output=True, text=True, timeout=60
    )


def test_the_celery_program_reports_a_settings_error_in_one_line():
    # As `celery -A project worker` loads it: sys.argv[0] is the celery program.
    done = celery_or_wsgi(
        "import sys; sys.argv[0] = '/usr/bin/celery'; import project.celery", DJANGO_SECRET_KEY=None, DJANGO_DEBUG=None
    )

    assert "Traceback" not in done.stderr
    assert done.stderr.splitlines() == [done.stderr.strip()] and done.stderr.startswith("celery: DJANGO_SECRET_KEY")
    assert done.returncode == 2


def test_the_wsgi_application_reports_a_settings_error_in_one_line():
    done = celery_or_wsgi("import project.wsgi", DJANGO_SECRET_KEY=None, DJANGO_DEBUG=None)

    assert "Traceback" not in done.stderr
    assert done.stderr.splitlines() == [done.stderr.strip()] and done.stderr.startswith("wsgi: DJANGO_SECRET_KEY")
    assert done.returncode == 3  # gunicorn's "Worker failed to boot": it stops instead of retrying


def test_cronfleet_host_is_answered_and_its_https_origin_trusted():
    done = check_settings(
        script="from django.conf import settings as s; print(s.ALLOWED_HOSTS); print(s.CSRF_TRUSTED_ORIGINS)",
        CRONFLEET_HOST="cron.example.com",
        DJANGO_ALLOWED_HOSTS="localhost,web",
        DJANGO_CSRF_TRUSTED_ORIGINS="https://other.example.com",
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "['localhost', 'web', 'cron.example.com']",
        "['https://other.example.com', 'https://cron.example.com']",
    ]


# --- Redis Sentinel (docs/operating.md: Redis Sentinel) --------------------------------------------
SENTINELS = "sentinel://10.0.0.1:26379/3;sentinel://10.0.0.2:26379/3"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"CELERY_BROKER_URL": SENTINELS, "CRONFLEET_SENTINEL_MASTER": ""},
            "CELERY_BROKER_URL is a sentinel:// URL: set CRONFLEET_SENTINEL_MASTER",
        ),
        # kombu reads the database from the first address: one given only on a later one is refused.
        (
            {
                "CELERY_BROKER_URL": "sentinel://10.0.0.1:26379;sentinel://10.0.0.2:26379/3",
                "CRONFLEET_SENTINEL_MASTER": "mymaster",
            },
            "CELERY_BROKER_URL: give the database number on the first",
        ),
        (
            {
                "CELERY_BROKER_URL": "sentinel://10.0.0.1:26379/3;redis://10.0.0.2:6379/3",
                "CRONFLEET_SENTINEL_MASTER": "mymaster",
            },
            "CELERY_BROKER_URL: 'redis://10.0.0.2:6379/3' is not a sentinel",
        ),
        (
            {"CELERY_BROKER_URL": "sentinel://10.0.0.1:port", "CRONFLEET_SENTINEL_MASTER": "mymaster"},
            "has a port that is not a number",
        ),
        (
            {
                "CELERY_BROKER_URL": "redis://127.0.0.1:6379/15",
                "CRONFLEET_RATE_LIMIT_REDIS_URL": SENTINELS,
                "CRONFLEET_SENTINEL_MASTER": "",
            },
            "CRONFLEET_RATE_LIMIT_REDIS_URL is a sentinel:// URL: set",
        ),
        (
            {
                "CELERY_BROKER_URL": SENTINELS,
                "CRONFLEET_SENTINEL_MASTER": "mymaster",
                "CRONFLEET_SENTINEL_TIMEOUT_SECONDS": "0",
            },
            "CRONFLEET_SENTINEL_TIMEOUT_SECONDS must be at least 0.1",
        ),
    ],
)
def test_a_sentinel_url_without_its_master_or_with_a_misplaced_database_stops_start_up(env, message):
    done = check_settings(**env)

    assert done.returncode != 0
    assert "ImproperlyConfigured" in done.stderr and message in done.stderr


def test_manage_py_names_the_missing_sentinel_master_in_one_line():
    done = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env=environment_with(CELERY_BROKER_URL=SENTINELS, CRONFLEET_SENTINEL_MASTER=None),
    )

    assert done.returncode == 2
    assert done.stderr.splitlines() == [done.stderr.strip()]
    assert done.stderr.startswith("manage.py: CELERY_BROKER_URL is a sentinel:// URL: set CRONFLEET_SENTINEL_MASTER")


SENTINEL_SCRIPT = """
from django.conf import settings
options = settings.CELERY_BROKER_TRANSPORT_OPTIONS
print(options["master_name"], options["sentinel_kwargs"], options["socket_connect_timeout"], options["priority_steps"][-1])
print(settings.CRONFLEET_RATE_LIMIT_REDIS_URL == settings.CELERY_BROKER_URL)
from kombu import Connection
conn = Connection(settings.CELERY_BROKER_URL, transport_options=options)
print(conn.transport_cls, conn.virtual_host, conn.alt)
from scheduler_app.redisclient import parse_sentinel_url
print(parse_sentinel_url("sentinel://u:p%40ss@10.0.0.1/3;sentinel://10.0.0.2:26380/3"))
"""


def test_a_sentinel_broker_gets_its_master_name_and_bounded_timeouts(tmp_path):
    done = check_settings(
        CRONFLEET_VAR_DIR=str(tmp_path),
        CELERY_BROKER_URL=SENTINELS,
        CRONFLEET_SENTINEL_MASTER="mymaster",
        CRONFLEET_SENTINEL_TIMEOUT_SECONDS="1.5",
        CRONFLEET_RATE_LIMIT_REDIS_URL="",
        script=SENTINEL_SCRIPT,
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "mymaster {'socket_timeout': 1.5, 'socket_connect_timeout': 1.5} 1.5 9",
        "True",  # the rate limits and the login throttle use the broker's Sentinels by default
        f"sentinel 3 {SENTINELS.split(';')}",
        "SentinelUrl(sentinels=[('10.0.0.1', 26379), ('10.0.0.2', 26380)], db=3, username='u', password='p@ss')",
    ]


TCP_BOUNDS_SCRIPT = """
from django.db import connections
from psycopg.conninfo import conninfo_to_dict
for alias in ("default", "reporting"):
    connections[alias].ensure_connection()
    dsn = conninfo_to_dict(connections[alias].connection.info.dsn)
    print(alias, dsn["tcp_user_timeout"], dsn["keepalives_idle"], dsn["connect_timeout"])
"""


def test_libpq_bounds_a_server_that_stops_answering_for_cronfleets_and_the_sql_jobs_databases(db):
    """What libpq itself was given (its connection's dsn), for the database and an SQL jobs' one:
    tests/faults/test_machine_loss.py shows what tcp_user_timeout does."""
    url = process_env()["DATABASE_URL"]
    done = check_settings(
        DATABASE_URL=url,
        CRONFLEET_SQL_DATABASES=json.dumps({"reporting": url}),
        DB_TCP_USER_TIMEOUT_MS="4000",
        DB_KEEPALIVES_IDLE="7",
        DB_CONNECT_TIMEOUT="3",
        script=TCP_BOUNDS_SCRIPT,
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["default 4000 7 3", "reporting 4000 7 3"]
