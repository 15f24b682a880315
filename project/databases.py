"""The settings' DATABASES, from the environment: Cronfleet's own database (DATABASE_URL) and
the databases SQL jobs may run statements on (CRONFLEET_SQL_DATABASES).

PostgreSQL in production (SKIP LOCKED, partial indexes); SQLite is the embedded default for a
first run, where writers are serialised by the database itself. A malformed value raises
ImproperlyConfigured naming the variable.
"""

from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from project import database_url
from project.env import env_int, env_json_object

POSTGRESQL = "django.db.backends.postgresql"
MYSQL = "django.db.backends.mysql"
SQLITE = "django.db.backends.sqlite3"


def tcp_bounds() -> dict:
    """libpq's bounds on a PostgreSQL server that stops answering, for Cronfleet's database and
    the SQL jobs'."""
    return {
        "connect_timeout": env_int("DB_CONNECT_TIMEOUT", 10, minimum=1),
        "keepalives": 1,
        "keepalives_idle": env_int("DB_KEEPALIVES_IDLE", 30, minimum=1),
        "keepalives_interval": 10,
        "keepalives_count": 3,
        "tcp_user_timeout": env_int("DB_TCP_USER_TIMEOUT_MS", 30000, minimum=0),
    }


def default_database(url: str, bounds: dict) -> dict:
    """Django's settings for Cronfleet's own database, `url` (DATABASE_URL)."""
    try:
        db = database_url.parse(url, conn_max_age=env_int("DB_CONN_MAX_AGE", 60, minimum=0))
    except ValueError as exc:
        raise ImproperlyConfigured(f"DATABASE_URL is not a valid database URL: {exc}") from None
    if db["ENGINE"] == SQLITE:
        db["OPTIONS"] = {
            # IMMEDIATE takes the write lock at BEGIN, so two processes never deadlock upgrading
            # a read lock; WAL lets readers (admin, worker) run beside the writer.
            "transaction_mode": "IMMEDIATE",
            "timeout": 30,
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
        Path(db["NAME"]).parent.mkdir(parents=True, exist_ok=True)
    elif db["ENGINE"] == POSTGRESQL:
        # Bounded waits everywhere: a dead server or a half-open TCP connection is noticed
        # (keepalives), a server machine gone from the network mid-statement is given up on once
        # what was sent stays unacknowledged for tcp_user_timeout (without it, Linux retransmits
        # for about 15 minutes), a lock is not waited on forever, and a transaction left open by a
        # frozen process (a SIGSTOPped beat holding claimed jobs) releases its row locks within
        # 10 s; our own transactions last milliseconds. Health checks reconnect after a restart.
        db.setdefault("OPTIONS", {})
        db["OPTIONS"].update(
            **bounds,
            options=" ".join(
                [
                    f"-c lock_timeout={env_int('DB_LOCK_TIMEOUT_MS', 5000, minimum=0)}",
                    f"-c statement_timeout={env_int('DB_STATEMENT_TIMEOUT_MS', 60000, minimum=0)}",
                    f"-c idle_in_transaction_session_timeout={env_int('DB_IDLE_IN_TRANSACTION_TIMEOUT_MS', 10000, minimum=0)}",
                ]
            ),
        )
        db["CONN_HEALTH_CHECKS"] = True
        _pool(db)
    return db


def _pool(db: dict) -> None:
    # The web server's connection pool (project/gunicorn.conf.py sets DB_POOL_MAX_SIZE to its
    # threads per process): at most that many connections per web process, reused across
    # requests. Beats and workers set no pool and keep one persistent connection per thread
    # (DB_CONN_MAX_AGE). Django refuses a pool beside persistent connections, and the pool is
    # what keeps connections here, so a DB_CONN_MAX_AGE shared with them through .env is not
    # an error for the web process.
    pool_max = env_int("DB_POOL_MAX_SIZE", 0, minimum=0)
    if not pool_max:
        return
    pool_min = env_int("DB_POOL_MIN_SIZE", 1, minimum=0)
    if pool_min > pool_max:
        raise ImproperlyConfigured(f"DB_POOL_MIN_SIZE ({pool_min}) must not exceed DB_POOL_MAX_SIZE ({pool_max})")
    db["CONN_MAX_AGE"] = 0
    db["OPTIONS"]["pool"] = {
        "min_size": pool_min,
        "max_size": pool_max,
        # A request waits this long for a free connection, then fails (never reached when
        # the pool has a connection per thread).
        "timeout": env_int("DB_POOL_TIMEOUT", 10, minimum=1),
        "name": "cronfleet-web",
    }


def sql_databases(bounds: dict) -> dict[str, dict]:
    """The databases SQL jobs may run statements on besides "default" (a job's CRONFLEET_SQL
    names the alias): CRONFLEET_SQL_DATABASES, a JSON object alias -> URL (PostgreSQL or
    MariaDB), e.g. {"reporting": "postgres://..."}. Cronfleet's tables are never migrated into
    them (scheduler_app.targets.sql.SqlDatabasesRouter)."""
    found = {}
    for alias, url in env_json_object("CRONFLEET_SQL_DATABASES", "alias -> database URL").items():
        if not alias.isidentifier() or alias == "default":
            raise ImproperlyConfigured(
                f"CRONFLEET_SQL_DATABASES.{alias}: an alias must be an identifier other than default"
            )
        try:
            db = database_url.parse(url, conn_max_age=env_int("DB_CONN_MAX_AGE", 60, minimum=0))
        except (TypeError, ValueError) as exc:
            raise ImproperlyConfigured(f"CRONFLEET_SQL_DATABASES.{alias}: not a valid database URL: {exc}") from None
        if db["ENGINE"] == POSTGRESQL:
            db.setdefault("OPTIONS", {}).update(bounds)  # a job's database that stops answering too
        elif db["ENGINE"] == MYSQL:
            db.setdefault("OPTIONS", {})["connect_timeout"] = bounds["connect_timeout"]
            db["OPTIONS"].setdefault("charset", "utf8mb4")  # Django's default utf8 is utf8mb3
        else:
            raise ImproperlyConfigured(
                f"CRONFLEET_SQL_DATABASES.{alias}: SQL jobs run on PostgreSQL "
                f"(postgres://) or MariaDB (mysql://), not {db['ENGINE']}"
            )
        db["CONN_HEALTH_CHECKS"] = True
        found[alias] = db
    return found
