"""Test settings: the real PostgreSQL and Redis on this machine unless the environment says
otherwise (pytest-django creates and drops the test database itself)."""

import json
import os

os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/cronfleet")
os.environ.setdefault("CELERY_BROKER_URL", "redis://127.0.0.1:6379/15")
# Under pytest-xdist each worker has a Redis database of its own below the URL's (gw0 keeps
# it, gw1 takes the one below, ...), as pytest-django gives each its own test database: the
# beats and workers one worker's tests start never meet another's.
_xdist_worker = os.environ.get("PYTEST_XDIST_WORKER", "")
if _xdist_worker.startswith("gw") and _xdist_worker[2:].isdigit() and int(_xdist_worker[2:]):
    from urllib.parse import urlsplit, urlunsplit

    _broker = urlsplit(os.environ["CELERY_BROKER_URL"])
    _db = int(_broker.path.strip("/") or 0) - int(_xdist_worker[2:])
    if _broker.scheme not in ("redis", "rediss") or _db < 0:
        raise RuntimeError(f"pytest-xdist worker {_xdist_worker} needs a Redis database below {_broker.path}")
    os.environ["CELERY_BROKER_URL"] = urlunsplit(_broker._replace(path=f"/{_db}"))
os.environ.setdefault("PGAPPNAME", "pytest")  # the suite's own sessions, apart from its processes'
# Debug stays off, as in production, so a key is needed (the processes tests start inherit it).
os.environ.setdefault("DJANGO_SECRET_KEY", "tests-only-secret-key-never-used-anywhere-else")
# The whole suite authenticates wrongly from 127.0.0.1 on purpose, far more than a client
# would; the tests of that limit set their own.
os.environ.setdefault("CRONFLEET_API_FAILED_AUTH_PER_MINUTE", "1000000")
# SQL jobs' tests run statements on MariaDB too, through this second alias (CRONFLEET_TEST_MARIADB_URL
# points it elsewhere). Only the tests that ask for the alias create its test database.
os.environ.setdefault(
    "CRONFLEET_SQL_DATABASES",
    json.dumps({"mariadb": os.environ.get("CRONFLEET_TEST_MARIADB_URL", "mysql://root@127.0.0.1:3306/test")}),
)

from project.settings import *  # noqa: E402,F403

# The test database is named after DATABASE_URL's (test_cronfleet for .../cronfleet), so a
# local run can keep it (./test.sh passes --reuse-db outside CI) and two runs are told apart by
# their URLs; CRONFLEET_TEST_DB_SUFFIX sets runs side by side on one server apart (pytest-xdist
# adds its own suffix per worker).
_suffix = os.environ.get("CRONFLEET_TEST_DB_SUFFIX", "")
DATABASES["default"]["TEST"] = {"NAME": f"test_{DATABASES['default']['NAME']}{_suffix}"}  # noqa: F405
if "mariadb" in DATABASES:  # noqa: F405
    DATABASES["mariadb"]["TEST"] = {"NAME": f"test_cronfleet_sql{_suffix}"}  # noqa: F405

# The suite's users log in with passwords thousands of times: PBKDF2 would spend 0.4 s on each
# (the processes tests start use project.settings and its hashers).
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# Django's task API on Cronfleet's backend, for tests/integration/djangotasks (tasks in
# tests/support/djtasks.py), writing to the tenant those tests make. Django 5.2 without the
# django-tasks backport reads no TASKS.
TASKS = {
    "default": {
        "BACKEND": "scheduler_app.djangotasks.CronfleetBackend",
        "QUEUES": ["default", "reports"],
        "OPTIONS": {"TENANT": "djtasks", "MAX_ATTEMPTS": 2, "RETRY_BACKOFF_SECONDS": 0},
    }
}
