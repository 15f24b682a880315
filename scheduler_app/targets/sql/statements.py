"""The allow-list (settings.CRONFLEET_SQL): each entry checked into a Statement."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from scheduler_app.targets import params as paramspecs
from scheduler_app.targets.sql.errors import InvalidSql
from scheduler_app.targets.sql.values import check_value

CONFIG_FIELD = "CRONFLEET_SQL"


# Filled from the run, never from the job: usable in any statement without a declaration.
RESERVED = ("fire_key", "scheduled_at", "attempt", "tenant")


VENDORS = {"postgresql": "PostgreSQL", "mysql": "MariaDB"}


ISOLATION_LEVELS = {
    "read_committed": "READ COMMITTED",
    "repeatable_read": "REPEATABLE READ",
    "serializable": "SERIALIZABLE",
}


DEFAULT_TIMEOUT = 30.0


MIN_TIMEOUT, MAX_TIMEOUT = 0.01, 3600.0


DEFAULT_MAX_ROWS, MAX_ROWS = 100, 10_000


# The statement's timeout is at most this share of the job's timeout_seconds, so the
# database cancels the statement before the worker's time limit interrupts the run.
JOB_TIMEOUT_SHARE = 0.9


_NAME = re.compile(r"[A-Za-z0-9_.-]+")


_PARAM_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


_PERCENT = re.compile(r"%(?:%|\(([^)]*)\)s)?")


_ENTRY_KEYS = frozenset({"database", "sql", "params", "read_only", "timeout", "max_rows", "isolation", "tenants"})


# A tenant's slug, as models.Tenant.slug (a SlugField of 64) holds it.
_TENANT_SLUG = re.compile(r"[-A-Za-z0-9_]{1,64}")


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
    tenants: frozenset[str] | None = None  # the tenants whose jobs may use it; None: every tenant


def vendor_of(database: Mapping) -> str | None:
    """ "postgresql" or "mysql" for a DATABASES entry SQL jobs can run on, else None."""
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
            raise InvalidSql(
                field,
                f"a '%' at offset {match.start()} is neither %(name)s nor %% (a literal "
                "percent); positional %s placeholders are not accepted",
            )
        names.add(name)
    return frozenset(names)


def _check_spec(field: str, spec: object, vendor: str) -> None:
    paramspecs.check_declaration(field, spec, _TYPE_KEYS, InvalidSql)
    assert isinstance(spec, Mapping)  # check_declaration refuses anything else
    if "default" in spec:
        try:
            check_value(field, spec, spec["default"], vendor)
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
        raise InvalidSql(
            f"{base}.database",
            f"unknown database alias {alias!r} (DATABASES has "
            f"{', '.join(sorted(databases))}; add one with CRONFLEET_SQL_DATABASES)",
        )
    vendor = vendor_of(databases[alias])
    if vendor is None:
        raise InvalidSql(
            f"{base}.database",
            f"alias {alias!r} uses {databases[alias].get('ENGINE')}; SQL jobs run on PostgreSQL or MariaDB",
        )

    sql = entry.get("sql")
    if not isinstance(sql, str) or not sql.strip():
        raise InvalidSql(f"{base}.sql", "is required: the statement's text")
    if "\x00" in sql:
        raise InvalidSql(f"{base}.sql", "contains a NUL character")
    if ";" in sql.strip().rstrip(";"):
        raise InvalidSql(
            f"{base}.sql", "must be one statement (a ';' inside it is refused; pass a literal ';' as a parameter)"
        )
    used = placeholders(f"{base}.sql", sql)

    params = entry.get("params", {})
    if not isinstance(params, Mapping):
        raise InvalidSql(f"{base}.params", "must be a mapping")
    for pname, spec in params.items():
        field = f"{base}.params.{pname}"
        if not isinstance(pname, str) or not _PARAM_NAME.fullmatch(pname):
            raise InvalidSql(f"{base}.params.{pname!r}", "parameter names must be identifiers")
        if pname in RESERVED:
            raise InvalidSql(
                field, f"is reserved (filled from the run: {', '.join(RESERVED)}); use %({pname})s without declaring it"
            )
        _check_spec(field, spec, vendor)
        if pname not in used:
            raise InvalidSql(field, f"is declared but the SQL does not use %({pname})s")
    undeclared = sorted(used - set(params) - set(RESERVED))
    if undeclared:
        raise InvalidSql(
            f"{base}.sql",
            f"%({undeclared[0]})s is not a declared parameter (declare it in params, "
            f"or use a reserved one: {', '.join(RESERVED)})",
        )

    read_only = entry.get("read_only", True)
    if not isinstance(read_only, bool):
        raise InvalidSql(f"{base}.read_only", "must be true or false")
    timeout = entry.get("timeout", DEFAULT_TIMEOUT)
    if not paramspecs.is_finite(timeout) or not MIN_TIMEOUT <= timeout <= MAX_TIMEOUT:
        raise InvalidSql(f"{base}.timeout", f"must be between {MIN_TIMEOUT:g} and {MAX_TIMEOUT:g} seconds")
    max_rows = entry.get("max_rows", DEFAULT_MAX_ROWS)
    if not paramspecs.is_int(max_rows) or not 0 <= max_rows <= MAX_ROWS:
        raise InvalidSql(f"{base}.max_rows", f"must be a whole number from 0 to {MAX_ROWS}")
    isolation = entry.get("isolation")
    if isolation is not None and isolation not in ISOLATION_LEVELS:
        raise InvalidSql(f"{base}.isolation", f"must be one of {', '.join(ISOLATION_LEVELS)}")
    return Statement(
        name=name,
        database=alias,
        vendor=vendor,
        sql=sql.strip().rstrip(";").rstrip(),
        params=params,
        placeholders=used,
        read_only=read_only,
        timeout=float(timeout),
        max_rows=max_rows,
        isolation=isolation,
        tenants=_check_tenants(f"{base}.tenants", entry.get("tenants")),
    )


def _check_tenants(field: str, tenants: object) -> frozenset[str] | None:
    """The entry's optional per-tenant restriction: a non-empty list of tenant slugs."""
    if tenants is None:
        return None
    if not isinstance(tenants, list | tuple) or not tenants:
        raise InvalidSql(field, "must be a non-empty list of tenant slugs (leave it out: every tenant may use it)")
    for index, slug in enumerate(tenants):
        if not isinstance(slug, str) or not _TENANT_SLUG.fullmatch(slug):
            raise InvalidSql(f"{field}[{index}]", "must be a tenant's slug (letters, digits, '-' and '_', at most 64)")
    return frozenset(tenants)


def check_tenant(stmt: Statement, tenant: object) -> None:
    """Refuse a job of a tenant the statement's ``tenants`` list leaves out (InvalidSql("name"))."""
    if stmt.tenants is not None and tenant not in stmt.tenants:
        raise InvalidSql(
            "name", f"statement {stmt.name!r} is not allowed for tenant {tenant!r} ({CONFIG_FIELD}.{stmt.name}.tenants)"
        )


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
