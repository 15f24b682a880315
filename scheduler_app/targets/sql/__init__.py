"""SQL jobs: run a statement named in an allow-list, its parameters always bound.

The allow-list is ``settings.CRONFLEET_SQL`` (JSON in the variable of that name), checked
at start-up (apps.py). One entry::

    "close_day": {
        "database": "reporting",          # an alias of DATABASES: PostgreSQL or MariaDB
        "sql": "INSERT INTO day_close (day, fire_key) VALUES (%(day)s, %(fire_key)s) "
               "ON CONFLICT (fire_key) DO NOTHING",
        "params": {"day": {"type": "date"}},
        "read_only": false,               # default true: the database refuses any write
        "timeout": 5,                     # seconds, 0.01-3600 (default 30)
        "max_rows": 100,                  # rows of a result kept on the run, 0-10000 (default 100)
        "isolation": "repeatable_read",   # read_committed | repeatable_read | serializable
                                          #   (default: the connection's)
        "tenants": ["acme"],              # only these tenants' jobs may use it (default: every tenant)
    }

The SQL is one statement with the driver's named placeholders ``%(name)s`` (``%%`` is a
literal percent). Every placeholder is a declared parameter or a reserved one (RESERVED:
``fire_key``, ``scheduled_at``, ``attempt``, ``tenant``, filled from the run so a statement
can be idempotent per fire), and every declared parameter is used. A job names the
statement and gives the parameters' values (target_config ``{"name", "params"}``); they are
checked against the declaration when the job is saved and again when it runs.

Values never become SQL text written by Cronfleet. On PostgreSQL they travel apart from the
statement (server-side binding, psycopg's extended protocol). mysqlclient (MariaDB) has no
server-side binding: the driver escapes each value with the server's own
mysql_real_escape_string for the connection's character set. Lists: PostgreSQL receives an
array (``col = ANY(%(ids)s)``); MariaDB a parenthesised list (``col IN %(ids)s``), which may
not be empty there.

A statement with ``tenants`` is refused (InvalidSql naming ``name``) to a job of any other
tenant: when the job is saved, if the caller passes the tenant to check(), and at every run.

Each run is one transaction on the alias: PostgreSQL ``SET TRANSACTION [ISOLATION LEVEL ..]
[READ ONLY]`` and ``SET LOCAL statement_timeout``; MariaDB ``SET TRANSACTION ISOLATION
LEVEL ..``, ``START TRANSACTION [READ ONLY]`` and ``SET STATEMENT max_statement_time=..,
innodb_lock_wait_timeout=.. FOR <statement>`` (MySQL proper has no statement timeout for
writes: refused when the job runs). Failures are classified (classify_error):
serialization failures, deadlocks, lock and statement timeouts and lost connections are
retried; syntax, permission, undefined objects, data and constraint errors and writes in a
read-only transaction are not.

At most max_rows + 1 rows of a result reach the worker (fetching.py: a cursor on
PostgreSQL, an unbuffered result on MariaDB), and after every run the session is reset
(session.py: DISCARD ALL on PostgreSQL, a new connection on MariaDB). docs/targets-sql.md
says what read_only stops and what it does not.

The package, by step: statements.py (the allow-list and its entries), params.py (a job's
parameters checked and bound), running.py (one statement run in its transaction), fetching.py (its rows, bounded),
session.py (the session reset after it), values.py (one value against its declared type),
errors.py (refusals, and failures classified retryable or not), jobs.py (the hooks of the services and
the worker), router.py (Cronfleet's tables stay out of the SQL jobs' databases).
"""

from scheduler_app.targets.sql.errors import (
    INT64,
    MYSQL_CODES,
    PG_CLASSES,
    PG_CODES,
    InvalidSql,
    StatementError,
    classify_error,
)
from scheduler_app.targets.sql.jobs import (
    check,
    check_target,
    describe,
    perform,
)
from scheduler_app.targets.sql.params import (
    bind_values,
    check_params,
    parse_cli_params,
)
from scheduler_app.targets.sql.router import (
    SqlDatabasesRouter,
)
from scheduler_app.targets.sql.running import (
    effective_timeout,
    run_statement,
)
from scheduler_app.targets.sql.statements import (
    CONFIG_FIELD,
    DEFAULT_MAX_ROWS,
    DEFAULT_TIMEOUT,
    ISOLATION_LEVELS,
    JOB_TIMEOUT_SHARE,
    MIN_TIMEOUT,
    RESERVED,
    VENDORS,
    Statement,
    check_entry,
    check_tenant,
    placeholders,
    statement,
    validate_config,
    vendor_of,
)
from scheduler_app.targets.sql.values import (
    check_value,
)

__all__ = [
    "CONFIG_FIELD",
    "DEFAULT_MAX_ROWS",
    "DEFAULT_TIMEOUT",
    "INT64",
    "ISOLATION_LEVELS",
    "InvalidSql",
    "JOB_TIMEOUT_SHARE",
    "MIN_TIMEOUT",
    "MYSQL_CODES",
    "PG_CLASSES",
    "PG_CODES",
    "RESERVED",
    "SqlDatabasesRouter",
    "Statement",
    "StatementError",
    "VENDORS",
    "bind_values",
    "check",
    "check_entry",
    "check_params",
    "check_target",
    "check_tenant",
    "check_value",
    "classify_error",
    "describe",
    "effective_timeout",
    "parse_cli_params",
    "perform",
    "placeholders",
    "run_statement",
    "statement",
    "validate_config",
    "vendor_of",
]
