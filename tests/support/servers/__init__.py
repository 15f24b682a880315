"""Private PostgreSQL, Redis and RabbitMQ servers for the tests that restart or shut down their server.

Restarting the machine's shared servers breaks every other test run using them at the same
time (a developer's run and CI, or parallel sessions with their own databases and Redis db
numbers). A scenario that restarts a server therefore starts one of its own, on a free
loopback port, in a temporary directory removed afterwards:

    with private_postgres() as server, database_on(server.host, server.port, "cronfleet"):
        ...  # this process's Django connection (and the processes it starts) use it
        server.restart_immediately()

    with private_redis() as server:
        ...  # point the broker at server.url(), then server.restart_without_persistence()

    with private_sentinel() as group:
        ...  # point the broker at group.url(), then group.master.kill(), group.wait_for_failover()

    with private_rabbitmq() as node:
        ...  # point the broker at node.url(), then node.kill() and node.start() on the same data

    with private_rabbitmq_cluster(nodes=3) as cluster:
        ...  # point the broker at cluster.url() (every node, for failover), then cluster.nodes[0].kill()

PostgreSQL's binaries are found in CRONFLEET_TEST_PG_BINDIR, else `pg_config --bindir`, else
on PATH; redis-server on PATH; RabbitMQ's server script in CRONFLEET_TEST_RABBITMQ_SERVER, else
where the Debian package puts it. A server that fails to start raises with its log's tail.

One module a server: postgres.py, redis_sentinel.py, rabbitmq.py, over common.py (free
ports, the process tree, logs). The names below are the package's: `from tests.support import
servers`, then `servers.private_postgres()`.
"""

from tests.support.servers.common import (
    HOST,
    LOG_TAIL_LINES,
    START_TIMEOUT,
    ServerError,
    children_of,
    descendants_of,
    free_port,
    log_tail,
    pid_alive,
    process_states,
    run,
)
from tests.support.servers.postgres import (
    POSTGRES_OS_USER,
    POSTGRES_PROGRAMS,
    PostgresServer,
    as_postgres_user,
    database_on,
    postgres_bindir,
    private_postgres,
    replicated_postgres,
)
from tests.support.servers.rabbitmq import (
    RABBITMQ_SERVER,
    RABBITMQ_STOP_TIMEOUT,
    RABBITMQ_USER,
    RabbitMQCluster,
    RabbitMQNode,
    private_rabbitmq,
    private_rabbitmq_cluster,
    rabbitmq_program,
)
from tests.support.servers.redis_sentinel import (
    SENTINEL_DOWN_AFTER_MS,
    SENTINEL_FAILOVER_TIMEOUT_MS,
    SENTINEL_MASTER,
    RedisServer,
    SentinelGroup,
    SentinelServer,
    private_redis,
    private_sentinel,
    redis_answers,
    spawn_redis,
)

__all__ = [
    "as_postgres_user",
    "children_of",
    "database_on",
    "descendants_of",
    "free_port",
    "HOST",
    "log_tail",
    "LOG_TAIL_LINES",
    "pid_alive",
    "postgres_bindir",
    "POSTGRES_OS_USER",
    "POSTGRES_PROGRAMS",
    "PostgresServer",
    "private_postgres",
    "private_rabbitmq",
    "private_rabbitmq_cluster",
    "private_redis",
    "private_sentinel",
    "process_states",
    "rabbitmq_program",
    "RABBITMQ_SERVER",
    "RABBITMQ_STOP_TIMEOUT",
    "RABBITMQ_USER",
    "RabbitMQCluster",
    "RabbitMQNode",
    "redis_answers",
    "RedisServer",
    "replicated_postgres",
    "run",
    "SENTINEL_DOWN_AFTER_MS",
    "SENTINEL_FAILOVER_TIMEOUT_MS",
    "SENTINEL_MASTER",
    "SentinelGroup",
    "SentinelServer",
    "ServerError",
    "spawn_redis",
    "START_TIMEOUT",
]
