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
    }                                     #   (default: the connection's)

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

Each run is one transaction on the alias: PostgreSQL ``SET TRANSACTION [ISOLATION LEVEL ..]
[READ ONLY]`` and ``SET LOCAL statement_timeout``; MariaDB ``SET TRANSACTION ISOLATION
LEVEL ..``, ``START TRANSACTION [READ ONLY]`` and ``SET STATEMENT max_statement_time=..,
innodb_lock_wait_timeout=.. FOR <statement>`` (MySQL proper has no statement timeout for
writes: refused when the job runs). Failures are classified (classify_error):
serialization failures, deadlocks, lock and statement timeouts and lost connections are
retried; syntax, permission, undefined objects, data and constraint errors and writes in a
read-only transaction are not.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal

from scheduler_app import paramspecs
from scheduler_app.validation import InvalidInput, check_instant_text

CONFIG_FIELD = "CRONFLEET_SQL"
# Filled from the run, never from the job: usable in any statement without a declaration.
RESERVED = ("fire_key", "scheduled_at", "attempt", "tenant")
VENDORS = {"postgresql": "PostgreSQL", "mysql": "MariaDB"}
ISOLATION_LEVELS = {"read_committed": "READ COMMITTED", "repeatable_read": "REPEATABLE READ",
                    "serializable": "SERIALIZABLE"}
DEFAULT_TIMEOUT = 30.0
MIN_TIMEOUT, MAX_TIMEOUT = 0.01, 3600.0
DEFAULT_MAX_ROWS, MAX_ROWS = 100, 10_000
# The statement's timeout is at most this share of the job's timeout_seconds, so the
# database cancels the statement before the worker's time limit interrupts the run.
JOB_TIMEOUT_SHARE = 0.9
INT64 = 2**63

_NAME = re.compile(r"[A-Za-z0-9_.-]+")
_PARAM_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PERCENT = re.compile(r"%(?:%|\(([^)]*)\)s)?")
_ISO_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_ENTRY_KEYS = frozenset({"database", "sql", "params", "read_only", "timeout", "max_rows", "isolation"})
_TYPE_KEYS = {
    "int": frozenset({"type", "default", "min", "max"}),
    "float": frozenset({"type", "default", "min", "max"}),
    "bool": frozenset({"type", "default"}),
    "str": frozenset({"type", "default", "max_length", "pattern"}),
    "choice": frozenset({"type", "default", "choices"}),
    "date": frozenset({"type", "default"}),
    "datetime": frozenset({"type", "default"}),
    "int_list": frozenset({"type", "default", "max_items", "min", "max"}),
    "str_list": frozenset({"type", "default", "max_items", "max_length", "pattern"}),
}


class InvalidSql(ValueError):
    """A statement's entry, or a job's parameters for it, are refused; ``field`` names what."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


class StatementError(Exception):
    """The database refused or interrupted the statement. ``kind`` names the class of
    failure (deadlock, statement_timeout, syntax_error, ...); ``retryable`` says whether
    another attempt may succeed."""

    def __init__(self, kind: str, detail: str, *, retryable: bool):
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail
        self.retryable = retryable


@dataclass(frozen=True)
class Statement:
    """A checked entry of the allow-list."""

    name: str
    database: str
    vendor: str  # "postgresql" or "mysql"
    sql: str
    params: Mapping
    placeholders: frozenset[str]
    read_only: bool
    timeout: float
    max_rows: int
    isolation: str | None


# --------------------------------------------------------------------------------------
# The allow-list
# --------------------------------------------------------------------------------------


_is_int, _is_number = paramspecs.is_int, paramspecs.is_number


def vendor_of(database: Mapping) -> str | None:
    """"postgresql" or "mysql" for a DATABASES entry SQL jobs can run on, else None."""
    engine = str(database.get("ENGINE", ""))
    if engine.endswith((".postgresql", ".postgis")):
        return "postgresql"
    if engine.endswith(".mysql"):
        return "mysql"
    return None


def placeholders(field: str, sql: str) -> frozenset[str]:
    """The names of the ``%(name)s`` placeholders in ``sql``; any other ``%`` is refused."""
    names = set()
    for match in _PERCENT.finditer(sql):
        if match.group(0) == "%%":
            continue
        name = match.group(1)
        if name is None or not _PARAM_NAME.fullmatch(name):
            raise InvalidSql(field, f"a '%' at offset {match.start()} is neither %(name)s nor %% (a literal "
                                    "percent); positional %s placeholders are not accepted")
        names.add(name)
    return frozenset(names)


def _check_spec(field: str, spec: object, vendor: str) -> None:
    paramspecs.check_declaration(field, spec, _TYPE_KEYS, InvalidSql)
    if "default" in spec:
        try:
            _value(field, spec, spec["default"], vendor)
        except InvalidSql as exc:
            raise InvalidSql(f"{field}.default", exc.message) from None


def check_entry(name: object, entry: object, databases: Mapping) -> Statement:
    """Check one entry of the allow-list against DATABASES; return it as a Statement."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise InvalidSql(f"{CONFIG_FIELD}.{name!r}", "statement names must match [A-Za-z0-9_.-]+")
    base = f"{CONFIG_FIELD}.{name}"
    if not isinstance(entry, Mapping):
        raise InvalidSql(base, "must be a mapping")
    unknown = sorted(map(str, set(entry) - _ENTRY_KEYS))
    if unknown:
        raise InvalidSql(f"{base}.{unknown[0]}", f"unknown key (known: {', '.join(sorted(_ENTRY_KEYS))})")

    alias = entry.get("database")
    if not isinstance(alias, str) or not alias:
        raise InvalidSql(f"{base}.database", "is required: an alias of DATABASES")
    if alias not in databases:
        raise InvalidSql(f"{base}.database", f"unknown database alias {alias!r} (DATABASES has "
                                             f"{', '.join(sorted(databases))}; add one with CRONFLEET_SQL_DATABASES)")
    vendor = vendor_of(databases[alias])
    if vendor is None:
        raise InvalidSql(f"{base}.database", f"alias {alias!r} uses {databases[alias].get('ENGINE')}; "
                                             "SQL jobs run on PostgreSQL or MariaDB")

    sql = entry.get("sql")
    if not isinstance(sql, str) or not sql.strip():
        raise InvalidSql(f"{base}.sql", "is required: the statement's text")
    if "\x00" in sql:
        raise InvalidSql(f"{base}.sql", "contains a NUL character")
    if ";" in sql.strip().rstrip(";"):
        raise InvalidSql(f"{base}.sql", "must be one statement (a ';' inside it is refused; pass a literal "
                                        "';' as a parameter)")
    used = placeholders(f"{base}.sql", sql)

    params = entry.get("params", {})
    if not isinstance(params, Mapping):
        raise InvalidSql(f"{base}.params", "must be a mapping")
    for pname, spec in params.items():
        field = f"{base}.params.{pname}"
        if not isinstance(pname, str) or not _PARAM_NAME.fullmatch(pname):
            raise InvalidSql(f"{base}.params.{pname!r}", "parameter names must be identifiers")
        if pname in RESERVED:
            raise InvalidSql(field, f"is reserved (filled from the run: {', '.join(RESERVED)}); use "
                                    f"%({pname})s without declaring it")
        _check_spec(field, spec, vendor)
        if pname not in used:
            raise InvalidSql(field, f"is declared but the SQL does not use %({pname})s")
    undeclared = sorted(used - set(params) - set(RESERVED))
    if undeclared:
        raise InvalidSql(f"{base}.sql", f"%({undeclared[0]})s is not a declared parameter (declare it in params, "
                                        f"or use a reserved one: {', '.join(RESERVED)})")

    read_only = entry.get("read_only", True)
    if not isinstance(read_only, bool):
        raise InvalidSql(f"{base}.read_only", "must be true or false")
    timeout = entry.get("timeout", DEFAULT_TIMEOUT)
    if not _is_number(timeout) or not math.isfinite(timeout) or not MIN_TIMEOUT <= timeout <= MAX_TIMEOUT:
        raise InvalidSql(f"{base}.timeout", f"must be between {MIN_TIMEOUT:g} and {MAX_TIMEOUT:g} seconds")
    max_rows = entry.get("max_rows", DEFAULT_MAX_ROWS)
    if not _is_int(max_rows) or not 0 <= max_rows <= MAX_ROWS:
        raise InvalidSql(f"{base}.max_rows", f"must be a whole number from 0 to {MAX_ROWS}")
    isolation = entry.get("isolation")
    if isolation is not None and isolation not in ISOLATION_LEVELS:
        raise InvalidSql(f"{base}.isolation", f"must be one of {', '.join(ISOLATION_LEVELS)}")
    return Statement(name=name, database=alias, vendor=vendor, sql=sql.strip().rstrip(";").rstrip(), params=params,
                     placeholders=used, read_only=read_only, timeout=float(timeout), max_rows=max_rows,
                     isolation=isolation)


def validate_config(config: object, databases: Mapping) -> None:
    """Check every entry; raise InvalidSql naming the first bad statement and key."""
    if not isinstance(config, Mapping):
        raise InvalidSql(CONFIG_FIELD, "must be a mapping of statement names")
    for name, entry in config.items():
        check_entry(name, entry, databases)


def statement(name: object, config: Mapping, databases: Mapping) -> Statement:
    """The checked entry named ``name``; InvalidSql("name") when the allow-list has none."""
    if not isinstance(config, Mapping):
        raise InvalidSql(CONFIG_FIELD, "must be a mapping of statement names")
    if not isinstance(name, str) or name not in config:
        raise InvalidSql("name", f"{name!r} is not a statement in {CONFIG_FIELD}")
    return check_entry(name, config[name], databases)


# --------------------------------------------------------------------------------------
# Parameters
# --------------------------------------------------------------------------------------


def _check_str(field: str, spec: Mapping, value: object) -> str:
    if not isinstance(value, str):
        raise InvalidSql(field, "must be a string")
    if "\x00" in value:
        raise InvalidSql(field, "contains a NUL character (U+0000), which PostgreSQL text cannot hold; "
                                "it is refused on every database")
    for char in value:
        if "\ud800" <= char <= "\udfff":
            raise InvalidSql(field, f"contains a lone surrogate (U+{ord(char):04X})")
    if len(value) > spec["max_length"]:
        raise InvalidSql(field, f"is longer than {spec['max_length']} characters")
    if "pattern" in spec and not re.fullmatch(spec["pattern"], value):
        raise InvalidSql(field, "does not match the allowed pattern")
    return value


def _check_int(field: str, spec: Mapping, value: object) -> int:
    if not _is_int(value):
        raise InvalidSql(field, "must be an integer")
    if not -INT64 <= value < INT64:
        raise InvalidSql(field, "must fit in 64 bits")
    if "min" in spec and value < spec["min"]:
        raise InvalidSql(field, f"must be >= {spec['min']}")
    if "max" in spec and value > spec["max"]:
        raise InvalidSql(field, f"must be <= {spec['max']}")
    return value


def _list(field: str, spec: Mapping, value: object, vendor: str) -> list:
    if not isinstance(value, list | tuple):
        raise InvalidSql(field, "must be a list")
    if len(value) > spec["max_items"]:
        raise InvalidSql(field, f"has more than {spec['max_items']} items")
    if not value and vendor == "mysql":
        raise InvalidSql(field, "must not be empty on MariaDB (IN () is a syntax error there)")
    return list(value)


def _value(field: str, spec: Mapping, value: object, vendor: str):
    """``value`` checked against ``spec``, as JSON stores it (dates as ISO text)."""
    ptype = spec["type"]
    if ptype == "int":
        return _check_int(field, spec, value)
    if ptype == "float":
        if not _is_number(value) or not math.isfinite(value):
            raise InvalidSql(field, "must be a finite number")
        if "min" in spec and value < spec["min"]:
            raise InvalidSql(field, f"must be >= {spec['min']}")
        if "max" in spec and value > spec["max"]:
            raise InvalidSql(field, f"must be <= {spec['max']}")
        return float(value)
    if ptype == "bool":
        if not isinstance(value, bool):
            raise InvalidSql(field, "must be true or false")
        return value
    if ptype == "str":
        return _check_str(field, spec, value)
    if ptype == "choice":
        if not isinstance(value, str) or value not in spec["choices"]:
            raise InvalidSql(field, f"must be one of {list(spec['choices'])}")
        return value
    if ptype == "date":
        if not isinstance(value, str) or not _ISO_DATE.fullmatch(value):
            raise InvalidSql(field, "must be an ISO date (YYYY-MM-DD)")
        try:
            return date.fromisoformat(value).isoformat()
        except ValueError:
            raise InvalidSql(field, "is not a valid calendar date") from None
    if ptype == "datetime":
        if not isinstance(value, str):
            raise InvalidSql(field, "must be an ISO 8601 date and time with a UTC offset")
        try:
            check_instant_text(field, value)
            parsed = datetime.fromisoformat(value)
        except InvalidInput as exc:
            raise InvalidSql(field, exc.message) from None
        except ValueError:
            raise InvalidSql(field, f"{value!r} is not an ISO 8601 date and time") from None
        if parsed.tzinfo is None or parsed.utcoffset() is None:
            raise InvalidSql(field, f"{value!r} has no UTC offset (naive times are refused)")
        return parsed.astimezone(UTC).isoformat()
    if ptype == "int_list":
        return [_check_int(f"{field}[{i}]", spec, item) for i, item in enumerate(_list(field, spec, value, vendor))]
    if ptype == "str_list":
        return [_check_str(f"{field}[{i}]", spec, item) for i, item in enumerate(_list(field, spec, value, vendor))]
    raise InvalidSql(f"{field}.type", f"unsupported type {ptype!r}")  # pragma: no cover


def check_params(stmt: Statement, params: object) -> dict:
    """The job's parameters for ``stmt``, checked and completed with defaults (as stored)."""
    if not isinstance(params, Mapping):
        raise InvalidSql("params", "must be a mapping")
    for key in params:
        if key in RESERVED:
            raise InvalidSql(f"params.{key}", "is reserved: filled from the run, not set by a job")
        if key not in stmt.params:
            raise InvalidSql(f"params.{key}", f"unknown parameter of statement {stmt.name!r}")
    values = {}
    for pname, spec in stmt.params.items():
        field = f"params.{pname}"
        if pname in params:
            values[pname] = _value(field, spec, params[pname], stmt.vendor)
        elif "default" in spec:
            values[pname] = _value(field, spec, spec["default"], stmt.vendor)
        else:
            raise InvalidSql(field, "is required")
    return values


def _bind(value, vendor: str):
    """A stored value as the driver binds it: dates as date/datetime objects (naive UTC
    wall time on MariaDB, which has no zone in DATETIME), lists as arrays (PostgreSQL) or
    tuples (MariaDB's IN list)."""
    if isinstance(value, datetime):
        return value if vendor == "postgresql" else value.astimezone(UTC).replace(tzinfo=None)
    if isinstance(value, list):
        bound = [_bind(item, vendor) for item in value]
        return bound if vendor == "postgresql" else tuple(bound)
    return value


def bind_values(stmt: Statement, values: Mapping, fire: Mapping) -> dict:
    """What the statement's placeholders receive: the job's checked values (dates parsed)
    and the reserved values of the fire."""
    bound = {}
    for pname in stmt.placeholders:
        if pname in RESERVED:
            bound[pname] = _bind(fire[pname], stmt.vendor)
            continue
        value, ptype = values[pname], stmt.params[pname]["type"]
        if ptype == "date":
            value = date.fromisoformat(value)
        elif ptype == "datetime":
            value = datetime.fromisoformat(value)
        bound[pname] = _bind(value, stmt.vendor)
    return bound


def parse_cli_params(name: str, items: list[str], config: Mapping) -> dict:
    """``--param K=V`` pairs for statement ``name``: numbers and booleans by the declared
    type; list parameters take every value given for their key."""
    entry = config.get(name) if isinstance(config, Mapping) else None
    specs = (entry.get("params") if isinstance(entry, Mapping) else None) or {}
    params: dict[str, object] = {}
    for item in items:
        key, found, text = item.partition("=")
        if not found or not key:
            raise InvalidInput("param", f"{item!r} is not KEY=VALUE")
        field = f"sql.params.{key}"
        ptype = (specs.get(key) or {}).get("type") if isinstance(specs.get(key), Mapping) else None
        value: object = text
        try:
            if ptype in ("int", "int_list"):
                value = int(text)
            elif ptype == "float":
                value = float(text)
        except ValueError:
            raise InvalidInput(field, f"{text!r} is not a {'number' if ptype == 'float' else 'whole number'}") \
                from None
        if ptype == "bool":
            lowered = text.strip().lower()
            if lowered not in ("true", "false", "1", "0", "yes", "no"):
                raise InvalidInput(field, f"{text!r} is not true or false")
            value = lowered in ("true", "1", "yes")
        if ptype in ("int_list", "str_list"):
            params.setdefault(key, [])
            params[key].append(value)  # type: ignore[union-attr]
        elif key in params:
            raise InvalidInput(field, "is given twice (only list parameters take several values)")
        else:
            params[key] = value
    return params


# --------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------

# PostgreSQL SQLSTATEs: exact codes first, then classes (the first two characters).
PG_CODES = {
    "40001": ("serialization_failure", True), "40P01": ("deadlock", True), "55P03": ("lock_timeout", True),
    "57014": ("statement_timeout", True), "25006": ("read_only_transaction", False),
    "42501": ("permission_denied", False), "42601": ("syntax_error", False),
    "42P01": ("undefined_object", False), "42703": ("undefined_object", False),
    "42883": ("undefined_object", False), "42704": ("undefined_object", False), "3F000": ("undefined_object", False),
}
PG_CLASSES = {
    "08": ("connection_error", True), "40": ("transaction_rollback", True), "53": ("insufficient_resources", True),
    "57": ("server_shutdown", True), "58": ("system_error", True), "XX": ("internal_error", True),
    "0A": ("not_supported", False), "21": ("cardinality_violation", False), "22": ("data_error", False),
    "23": ("integrity_error", False), "25": ("invalid_transaction_state", False),
    "28": ("invalid_authorization", False), "2B": ("dependent_objects", False), "3D": ("undefined_object", False),
    "42": ("syntax_or_access_error", False), "44": ("check_option_violation", False),
}
# MariaDB / MySQL error numbers.
MYSQL_CODES = {
    1213: ("deadlock", True), 1205: ("lock_timeout", True), 1020: ("serialization_failure", True),
    1969: ("statement_timeout", True), 3024: ("statement_timeout", True), 1317: ("interrupted", True),
    1040: ("connection_error", True), 1053: ("connection_error", True), 1927: ("connection_error", True),
    4031: ("connection_error", True),
    1792: ("read_only_transaction", False), 1064: ("syntax_error", False), 1149: ("syntax_error", False),
    1044: ("permission_denied", False), 1045: ("permission_denied", False), 1142: ("permission_denied", False),
    1143: ("permission_denied", False), 1227: ("permission_denied", False), 1370: ("permission_denied", False),
    1146: ("undefined_object", False), 1054: ("undefined_object", False), 1305: ("undefined_object", False),
    1049: ("undefined_object", False), 1051: ("undefined_object", False), 1630: ("undefined_object", False),
    1048: ("data_error", False), 1264: ("data_error", False), 1265: ("data_error", False),
    1292: ("data_error", False), 1366: ("data_error", False), 1406: ("data_error", False),
    1690: ("data_error", False), 1062: ("integrity_error", False), 1216: ("integrity_error", False),
    1217: ("integrity_error", False), 1451: ("integrity_error", False), 1452: ("integrity_error", False),
    4025: ("integrity_error", False),
}


def classify_error(exc: BaseException, vendor: str) -> StatementError:
    """A driver's (or Django's wrapped) database error as a StatementError."""
    cause = exc.__cause__ if exc.__cause__ is not None and type(exc).__module__.startswith("django.") else exc
    message = " ".join(str(cause).split())[:1000] or type(cause).__name__
    if vendor == "postgresql":
        code = getattr(cause, "sqlstate", None)
        if code:
            kind, retryable = PG_CODES.get(code) or PG_CLASSES.get(code[:2]) or _by_class(cause)
            return StatementError(kind, f"SQLSTATE {code}: {message}", retryable=retryable)
    else:
        args = getattr(cause, "args", ())
        code = args[0] if args and _is_int(args[0]) else None
        if code is not None:
            # 2000-2999: the client library's own errors (server gone away, lost connection...).
            kind, retryable = MYSQL_CODES.get(code) or (
                ("connection_error", True) if 2000 <= code < 3000 else _by_class(cause))
            text = args[1] if len(args) > 1 else message
            return StatementError(kind, f"error {code}: {text}", retryable=retryable)
    kind, retryable = _by_class(cause)
    if retryable and vendor == "postgresql":  # no SQLSTATE: libpq could not reach or lost the server
        kind = "connection_error"
    return StatementError(kind, message, retryable=retryable)


def _by_class(exc: BaseException) -> tuple[str, bool]:
    """By the DB-API exception class: OperationalError (the connection, the server's
    state) may pass; the rest (programming, data, integrity errors) will not."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    if "OperationalError" in names or "InterfaceError" in names:
        return "database_error", True
    return "database_error", False


# --------------------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------------------


def _jsonable(value):
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, bytes | bytearray | memoryview):
        return "\\x" + bytes(value).hex()
    if isinstance(value, list | tuple):
        return [_jsonable(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _jsonable(item) for key, item in value.items()}
    return str(value)


def _fit(result: dict, rows: list, max_bytes: int) -> dict:
    """``result`` with as many of ``rows`` as fit in ``max_bytes`` of JSON (whole rows only,
    so the recorded result stays valid JSON); ``truncated`` when some were left out."""
    def size(count: int) -> int:
        return len(json.dumps({**result, "rows": rows[:count]}, sort_keys=True).encode())

    if size(len(rows)) <= max_bytes:
        return {**result, "rows": rows}
    low, high = 0, len(rows)  # size(low) fits or low == 0; size(high) does not
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if size(middle) <= max_bytes else (low, middle)
    return {**result, "rows": rows[:low], "truncated": True}


def effective_timeout(stmt: Statement, job_timeout: float) -> float:
    return max(MIN_TIMEOUT, min(stmt.timeout, job_timeout * JOB_TIMEOUT_SHARE))


def _preamble(stmt: Statement, timeout: float) -> list[str]:
    """The statements that open the transaction (constants and validated numbers only)."""
    level = ISOLATION_LEVELS.get(stmt.isolation or "")
    if stmt.vendor == "postgresql":
        modes = [f"ISOLATION LEVEL {level}"] if level else []
        modes += ["READ ONLY"] if stmt.read_only else []
        setup = [f"SET TRANSACTION {', '.join(modes)}"] if modes else []
        return [*setup, f"SET LOCAL statement_timeout = {max(1, round(timeout * 1000))}"]
    setup = [f"SET TRANSACTION ISOLATION LEVEL {level}"] if level else []
    return [*setup, "START TRANSACTION READ ONLY" if stmt.read_only else "START TRANSACTION"]


def _statement_text(stmt: Statement, timeout: float) -> str:
    if stmt.vendor == "postgresql":
        return stmt.sql
    # max_statement_time bounds the statement; lock waits are bounded alike (whole seconds).
    return (f"SET STATEMENT max_statement_time={timeout:.3f}, innodb_lock_wait_timeout={math.ceil(timeout)} "
            f"FOR {stmt.sql}")


def run_statement(name: str, params: Mapping, *, config: Mapping, databases: Mapping, fire: Mapping,
                  job_timeout: float, max_bytes: int) -> dict:
    """Run allow-listed statement ``name`` once, in its own transaction on its alias.

    ``fire`` holds the reserved values (RESERVED). Returns rows affected, the columns, at
    most max_rows rows fitted into ``max_bytes`` of JSON, and the elapsed time. Raises
    InvalidSql (the entry or the parameters are refused) or StatementError.
    """
    from django.db import DatabaseError, connections, transaction

    stmt = statement(name, config, databases)
    values = check_params(stmt, params)
    bound = bind_values(stmt, values, fire)
    timeout = effective_timeout(stmt, job_timeout)
    connection = connections[stmt.database]
    if connection.in_atomic_block:
        raise StatementError("in_transaction", f"database {stmt.database!r} is inside an open transaction here; "
                                               "a SQL job needs a transaction of its own", retryable=False)
    started = time.monotonic()
    try:
        with transaction.atomic(using=stmt.database), connection.wrap_database_errors:
            if stmt.vendor == "mysql" and not connection.mysql_is_mariadb:
                raise StatementError("not_supported", f"{stmt.database!r} is MySQL, which has no statement timeout "
                                                      "for writes (max_statement_time); SQL jobs run on MariaDB",
                                     retryable=False)
            cursor = _cursor(connection, stmt.vendor)
            try:
                for setup in _preamble(stmt, timeout):
                    cursor.execute(setup)
                cursor.execute(_statement_text(stmt, timeout), bound)
                rows_affected = cursor.rowcount
                columns = [column[0] for column in cursor.description] if cursor.description else []
                rows = [list(row) for row in cursor.fetchmany(stmt.max_rows + 1)] if cursor.description else []
            finally:
                cursor.close()
    except DatabaseError as exc:
        error = classify_error(exc, stmt.vendor)
        raise StatementError(error.kind, f"{error.detail} (statement {stmt.name!r} on {stmt.database!r}, "
                                         f"timeout {timeout:g}s)", retryable=error.retryable) from None
    elapsed = time.monotonic() - started
    result = {
        "statement": stmt.name, "database": stmt.database, "rows_affected": rows_affected, "columns": columns,
        "truncated": len(rows) > stmt.max_rows, "elapsed_ms": round(elapsed * 1000, 1),
    }
    return _fit(result, _jsonable(rows[: stmt.max_rows]), max_bytes)


def _cursor(connection, vendor: str):
    """A cursor of the driver itself. PostgreSQL: psycopg's server-side-binding Cursor (the
    parameters travel apart from the statement; Django's own cursors bind client-side)."""
    connection.ensure_connection()
    if vendor == "postgresql":
        import psycopg

        return psycopg.Cursor(connection.connection)
    return connection.connection.cursor()


# --------------------------------------------------------------------------------------
# The hooks of the services and the worker
# --------------------------------------------------------------------------------------


def check_target(target: object) -> dict:
    """A job's SQL target ({"name", "params"}) as stored; InvalidInput naming sql.<field>."""
    from django.conf import settings

    target = target if isinstance(target, Mapping) else {}
    name, params = target.get("name", ""), target.get("params") or {}
    if not isinstance(params, Mapping):
        raise InvalidInput("sql.params", "must be an object")
    try:
        stmt = statement(name, settings.CRONFLEET_SQL, settings.DATABASES)
        return {"name": name, "params": check_params(stmt, params)}
    except InvalidSql as exc:
        raise InvalidInput(f"sql.{exc.field}", exc.message) from None


def describe(target: Mapping) -> str:
    """One line for the CLI and the admin: the statement, its parameters and, when the
    allow-list still has it, where and how it runs."""
    from django.conf import settings

    name, params = target.get("name", ""), target.get("params") or {}
    entry = settings.CRONFLEET_SQL.get(name) if isinstance(name, str) else None
    if not isinstance(entry, Mapping):
        return f"sql {name} {json.dumps(params, sort_keys=True)} (not in {CONFIG_FIELD})"
    mode = "read-only" if entry.get("read_only", True) else "read-write"
    return (f"sql {name} {json.dumps(params, sort_keys=True)} on {entry.get('database')} ({mode}, "
            f"timeout {entry.get('timeout', DEFAULT_TIMEOUT):g}s): {entry.get('sql')}")


def perform(started) -> dict:
    """execution.perform for target kind "sql": run the job's statement for this attempt."""
    from django.conf import settings

    from scheduler_app.execution import PermanentFailure, RetryableFailure

    run, job = started.run, started.job
    config = job.target_config or {}
    fire = {"fire_key": run.fire_key, "scheduled_at": run.scheduled_at, "attempt": run.attempt,
            "tenant": started.tenant}
    try:
        return run_statement(config.get("name", ""), config.get("params") or {}, config=settings.CRONFLEET_SQL,
                             databases=settings.DATABASES, fire=fire, job_timeout=job.timeout_seconds,
                             max_bytes=settings.CRONFLEET_RESULT_MAX_BYTES)
    except InvalidSql as exc:
        raise PermanentFailure(f"invalid_sql: sql.{exc.field}: {exc.message}") from None
    except StatementError as exc:
        raise (RetryableFailure if exc.retryable else PermanentFailure)(str(exc)) from None


# --------------------------------------------------------------------------------------
# Settings
# --------------------------------------------------------------------------------------


class SqlDatabasesRouter:
    """Cronfleet's own tables live in "default" only: `migrate` (and the test runner) never
    creates them in a database added for SQL jobs (CRONFLEET_SQL_DATABASES)."""

    def allow_migrate(self, db, app_label, model_name=None, **hints):
        from django.conf import settings

        return False if db in getattr(settings, "CRONFLEET_SQL_DATABASE_ALIASES", ()) else None
