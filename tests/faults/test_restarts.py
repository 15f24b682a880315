"""Fault scenarios that restart the servers themselves: PostgreSQL (immediate mode) and
Redis (without persistence).

Each scenario restarts a server of its own (tests/support/servers/), started on a free loopback
port for the test and removed after it, never the machine's shared PostgreSQL or Redis:
other test runs on the machine use those at the same time. They need PostgreSQL's server
programs (initdb, pg_ctl, postgres) and redis-server installed, and are skipped otherwise.
"""

import shutil

import pytest
from django.db import connection
from django.test import override_settings

from tests.faults.harness import RESTART_LAG_BOUND
from tests.faults.test_faults import WINDOW, assert_clean
from tests.support import servers

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.faults]


@pytest.fixture
def private_broker(monkeypatch):
    """A Redis of this test's own as the broker of the test process and of the beats and
    workers it starts (which take CELERY_BROKER_URL from these settings, and the rate
    limit's Redis from the broker when the environment does not name one)."""
    if shutil.which("redis-server") is None:
        pytest.skip("needs redis-server")
    monkeypatch.delenv("CRONFLEET_RATE_LIMIT_REDIS_URL", raising=False)
    with servers.private_redis() as server:
        url = server.url()
        with override_settings(CELERY_BROKER_URL=url, CRONFLEET_RATE_LIMIT_REDIS_URL=url):
            yield server


def test_postgresql_restarted_in_immediate_mode_under_load(private_database, cluster):
    cluster.seed()
    cluster.start()

    cluster.run_until(WINDOW / 2)
    private_database.restart_immediately()
    connection.close()  # this process's own connection died with the server
    cluster.run_until(WINDOW + 5)
    cluster.finish()

    assert_clean(
        cluster.check(
            "PostgreSQL restarted (immediate) under load", raw_duplicates_allowed=True, lag_bound=RESTART_LAG_BOUND
        )
    )


def test_redis_restarted_without_persistence_loses_no_fire(private_broker, cluster):
    cluster.seed()
    cluster.start()

    cluster.run_until(WINDOW / 2)
    private_broker.restart_without_persistence()
    cluster.run_until(WINDOW + 5)
    cluster.finish()

    assert_clean(cluster.check("Redis restarted without persistence", lag_bound=RESTART_LAG_BOUND))
