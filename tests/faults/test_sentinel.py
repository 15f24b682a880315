"""The broker's Redis master lost: Redis Sentinel promotes its replica, and the web's
queue-depth reads, the API rate limits and the admin login throttle follow it through
CELERY_BROKER_URL=sentinel://... and CRONFLEET_SENTINEL_MASTER (issue 28).

A master, a replica (--replicaof) and a Sentinel of this test's own (tests/support/servers/:
private_sentinel, quorum 1, down after 1 s) on free ports; the master is SIGKILLed and the
clients must reach the promoted replica without a restart. A worker's part, kombu's close of the
connection the loss broke, is tested here alone (scheduler_app/worker/redisacks.py) and in the
mid-spike scenario with a beat and two workers (test_sentinel_spike.py).
"""

import shutil
import subprocess
import sys
import time

import pytest
from django.test import override_settings

from scheduler_app.queues import redis_list_keys
from tests.conftest import ROOT, process_env, wait_for
from tests.support import servers

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.faults]


@pytest.fixture
def sentinel(monkeypatch):
    """A Sentinel-watched master and replica as the broker (and the rate limits' Redis) of
    this process and of the beats and workers it starts."""
    if shutil.which("redis-server") is None:
        pytest.skip("needs redis-server")
    monkeypatch.delenv("CRONFLEET_RATE_LIMIT_REDIS_URL", raising=False)
    monkeypatch.setenv("CRONFLEET_SENTINEL_MASTER", servers.SENTINEL_MASTER)  # for the processes' settings
    with servers.private_sentinel() as group:
        url = group.url()
        with override_settings(
            CELERY_BROKER_URL=url, CRONFLEET_RATE_LIMIT_REDIS_URL=url, CRONFLEET_SENTINEL_MASTER=group.master_name
        ):
            yield group


def queued(server: servers.RedisServer, queue: str) -> int:
    """Messages waiting in `queue` on this Redis (each priority list's length)."""
    client = server.client()
    try:
        with client.pipeline(transaction=False) as pipe:
            for key in redis_list_keys(queue):
                pipe.llen(key)
            return sum(pipe.execute())
    finally:
        client.close()


def depths_through_sentinel(queue: str) -> dict:
    """queue_depths as the web's /metrics reads it, in a process of the settings' own (kombu's
    sentinel transport, configured by CELERY_BROKER_TRANSPORT_OPTIONS)."""
    script = (
        "import django; django.setup()\nfrom scheduler_app.queues import queue_depths\n"
        f"print(queue_depths([{queue!r}])[{queue!r}])"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=process_env(), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return int(done.stdout.strip())


def test_the_rate_limits_login_throttle_and_queue_depths_follow_the_failover(sentinel, settings, monkeypatch):
    """The web's Redis clients through the Sentinel: before the master's loss and after the
    replica's promotion, without being told of the new address."""
    from celery import current_app

    from scheduler_app.admin import login
    from scheduler_app.api import throttling
    from scheduler_app.queues import queue_depths

    monkeypatch.setattr(login, "_redis", {})
    monkeypatch.setenv("CELERY_BROKER_URL", settings.CELERY_BROKER_URL)  # Celery reads it before its conf
    # This process's Celery read its broker settings at start-up: pointed at the Sentinel, as
    # project/settings.py points a process started with a sentinel:// URL.
    for name, value in [
        ("broker_url", settings.CELERY_BROKER_URL),
        (
            "broker_transport_options",
            {
                **settings.CELERY_BROKER_TRANSPORT_OPTIONS,
                "master_name": sentinel.master_name,
                "sentinel_kwargs": {"socket_timeout": 2, "socket_connect_timeout": 2},
                "socket_connect_timeout": 2,
            },
        ),
    ]:
        monkeypatch.setitem(current_app.conf, name, value)
    queue = "sentinel-depth"
    master = sentinel.master.client()
    master.lpush(redis_list_keys(queue)[0], "a", "b", "c")
    master.close()

    now = time.time()
    assert throttling.counter.hit(["sentinel"], now) == [1]
    login.record_failure("sentinel-user", now)
    assert login.refused_for("sentinel-user", now) is None
    assert len(login.failures().recent("sentinel-user", now, 60)) == 1
    assert queue_depths([queue]) == {queue: 3}
    wait_for(lambda: queued(sentinel.replica, queue) == 3, timeout=10, what="the replica to have the messages")

    sentinel.master.kill()
    sentinel.wait_for_failover()

    # The rate limiter's first call may meet the dead master's connection: it fails open and
    # its breaker asks again after CRONFLEET_RATE_LIMIT_RETRY_SECONDS; then it counts on.
    settings.CRONFLEET_RATE_LIMIT_RETRY_SECONDS = 1
    counted = wait_for(
        lambda: throttling.counter.hit(["sentinel"], now),
        timeout=15,
        interval=0.2,
        what="the rate limiter to count on the promoted master",
    )
    assert counted == [2]  # the count replicated before the loss, and counted on from there
    assert wait_for(
        lambda: len(_recent_or_none(login, now) or []) == 1,
        timeout=15,
        interval=0.2,
        what="the login throttle to read the promoted master",
    )
    assert queue_depths([queue]) == {queue: 3}
    assert depths_through_sentinel(queue) == 3


def _recent_or_none(login, now):
    import redis

    try:
        return login.failures().recent("sentinel-user", now, 60)
    except redis.RedisError:
        return None


@pytest.mark.parametrize("guarded", [False, True], ids=["kombu alone", "with the worker's guard"])
def test_a_worker_closing_the_lost_masters_connection_with_messages_taken(
    sentinel, settings, caplog, monkeypatch, guarded
):
    """What a worker's consumer does when the master is lost (Celery's
    on_connection_error_after_connected: collect(), then close()), on a connection whose
    consumer channel waits in BRPOP and, like a second channel, holds a message taken and not
    acknowledged. kombu 5.7.0 alone raises AttributeError from the close, which stops a worker
    (scheduler_app/worker/redisacks.py says why); with the worker's guard nothing is raised, and
    each message not put back or not acknowledged is one line saying what comes of it."""
    from kombu import Connection, Exchange, Queue
    from kombu.transport import redis as kombu_redis

    from scheduler_app.worker import redisacks

    # The guard patches kombu's class for the process; here, for this test only.
    monkeypatch.setattr(redisacks, "_original", {})
    for name in ("restore_unacked", "ack", "reject"):
        monkeypatch.setattr(kombu_redis.QoS, name, getattr(kombu_redis.QoS, name))
    if guarded:
        redisacks.install()
    options = {
        **settings.CELERY_BROKER_TRANSPORT_OPTIONS,
        "master_name": sentinel.master_name,
        "sentinel_kwargs": {"socket_timeout": 2, "socket_connect_timeout": 2},
        "socket_connect_timeout": 2,
    }
    connection = Connection(settings.CELERY_BROKER_URL, transport_options=options)
    queue = Queue("sentinel-acks", Exchange("sentinel-acks", type="direct"), routing_key="sentinel-acks")
    with connection.Producer() as producer:
        for i in range(2):
            producer.publish({"i": i}, exchange=queue.exchange, routing_key=queue.routing_key, declare=[queue])
    taken = []
    consumer = connection.Consumer(queue, callbacks=[lambda body, message: taken.append(message)])  # default channel
    consumer.consume()
    connection.drain_events(timeout=5)
    other = queue.bind(connection.channel()).get(no_ack=False)
    with pytest.raises(TimeoutError):
        connection.drain_events(timeout=0.5)  # the queue is empty now: a BRPOP waits on the consumer's channel
    assert len(taken) == 1 and other is not None

    sentinel.master.kill()
    caplog.set_level("WARNING", logger="scheduler_app.worker")
    connection.collect(socket_timeout=5)
    if not guarded:
        # Should kombu stop raising it here, redisacks.py may go (and this case with it).
        with pytest.raises(AttributeError, match="'NoneType' object has no attribute 'hostname'"):
            connection.close()
        return
    connection.close()
    taken[0].ack()
    lines = [record.getMessage() for record in caplog.records if record.name == "scheduler_app.worker"]
    assert sum("not put back" in line for line in lines) == 2, lines
    assert sum(f"ack of message {taken[0].delivery_tag} not sent" in line for line in lines) == 1, lines
    assert all(redisacks.COMES_BACK in line for line in lines), lines
