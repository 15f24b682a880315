"""Fault scenarios that restart the shared servers themselves (PostgreSQL, Redis).

They need the right to restart the local servers (as CI has): skipped otherwise. Each
waits until its server answers again, so the tests after it find it running.
"""

import shutil
import subprocess

import psycopg
import pytest
import redis
from django.conf import settings
from django.db import connection

from tests.conftest import wait_for
from tests.faults.harness import RESTART_LAG_BOUND
from tests.faults.test_faults import WINDOW, assert_clean

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.faults]


def can_restart_postgres() -> bool:
    return shutil.which("pg_ctlcluster") is not None and shutil.which("pg_lsclusters") is not None


def postgres_answers() -> bool:
    try:
        psycopg.connect("host=127.0.0.1 port=5432 user=postgres dbname=postgres connect_timeout=2").close()
    except psycopg.OperationalError:
        return False
    return True


def restart_postgres_immediately() -> None:
    version, name = subprocess.run(["pg_lsclusters", "-h"], capture_output=True, text=True,
                                   check=True).stdout.split()[:2]
    try:
        subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", "-m", "immediate", version, name, "restart"],
                       check=True, capture_output=True, timeout=120)
    finally:
        wait_for(postgres_answers, timeout=120, interval=0.5, what="PostgreSQL to answer again")
        connection.close()  # this process's own connection died with the server


def redis_answers(client) -> bool:
    try:
        return client.ping()
    except redis.ConnectionError:
        return False


def restart_redis_without_persistence() -> None:
    client = redis.Redis(host="127.0.0.1", port=6379, socket_connect_timeout=2)
    try:
        client.shutdown(nosave=True)
    except redis.ConnectionError:
        pass  # shutting down closes the connection
    try:
        subprocess.run(["redis-server", "--daemonize", "yes", "--bind", "127.0.0.1", "-::1", "--port", "6379",
                        "--save", "", "--appendonly", "no"], check=True, capture_output=True, timeout=60)
    finally:
        wait_for(lambda: redis_answers(client), timeout=60, interval=0.5, what="Redis to answer again")
        client.close()


@pytest.mark.skipif(not can_restart_postgres(), reason="needs pg_ctlcluster to restart the local PostgreSQL")
def test_postgresql_restarted_in_immediate_mode_under_load(cluster):
    cluster.seed()
    cluster.start()

    cluster.run_until(WINDOW / 2)
    restart_postgres_immediately()
    cluster.run_until(WINDOW + 5)
    cluster.finish()

    assert_clean(cluster.check("PostgreSQL restarted (immediate) under load", raw_duplicates_allowed=True,
                               lag_bound=RESTART_LAG_BOUND))


@pytest.mark.skipif(shutil.which("redis-server") is None or not settings.CELERY_BROKER_URL.startswith("redis://127.0.0.1"),
                    reason="needs the local redis-server to restart")
def test_redis_restarted_without_persistence_loses_no_fire(cluster):
    cluster.seed()
    cluster.start()

    cluster.run_until(WINDOW / 2)
    restart_redis_without_persistence()
    cluster.run_until(WINDOW + 5)
    cluster.finish()

    assert_clean(cluster.check("Redis restarted without persistence", lag_bound=RESTART_LAG_BOUND))
