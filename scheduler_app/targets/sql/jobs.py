"""The hooks of the services (check, check_target, describe) and of the worker (perform)."""

from __future__ import annotations

import json
from collections.abc import Mapping

from django.conf import settings

from scheduler_app.conf import app_settings
from scheduler_app.targets.base import PermanentFailure, RetryableFailure
from scheduler_app.targets.sql.errors import InvalidSql, StatementError
from scheduler_app.targets.sql.params import check_params
from scheduler_app.targets.sql.running import run_statement
from scheduler_app.targets.sql.statements import CONFIG_FIELD, DEFAULT_TIMEOUT, check_tenant, statement
from scheduler_app.validation import InvalidInput


def check_target(target: object, tenant: str | None = None) -> dict:
    """A job's SQL target ({"name", "params"}) as stored; InvalidInput naming sql.<field>.
    With ``tenant`` (a slug), a statement whose ``tenants`` list leaves it out is refused
    (sql.name); the run checks it again in any case."""
    target = target if isinstance(target, Mapping) else {}
    name, params = target.get("name", ""), target.get("params") or {}
    if not isinstance(params, Mapping):
        raise InvalidInput("sql.params", "must be an object")
    try:
        stmt = statement(name, app_settings.SQL, settings.DATABASES)
        if tenant is not None:
            check_tenant(stmt, tenant)
        return {"name": name, "params": check_params(stmt, params)}
    except InvalidSql as exc:
        raise InvalidInput(f"sql.{exc.field}", exc.message) from None


def check(spec, tenant: str | None = None) -> dict:
    """The target interface's check: the job spec's SQL target, as check_target stores it
    (``tenant``: the saving tenant's slug, when the caller passes it)."""
    return check_target(spec.sql, tenant)


def describe(target: Mapping) -> str:
    """One line for the CLI and the admin: the statement, its parameters and, when the
    allow-list still has it, where and how it runs."""
    name, params = target.get("name", ""), target.get("params") or {}
    entry = app_settings.SQL.get(name) if isinstance(name, str) else None
    if not isinstance(entry, Mapping):
        return f"sql {name} {json.dumps(params, sort_keys=True)} (not in {CONFIG_FIELD})"
    mode = "read-only" if entry.get("read_only", True) else "read-write"
    tenants = entry.get("tenants")
    only = f", tenants {', '.join(map(str, tenants))}" if isinstance(tenants, list | tuple) else ""
    return (
        f"sql {name} {json.dumps(params, sort_keys=True)} on {entry.get('database')} ({mode}, "
        f"timeout {entry.get('timeout', DEFAULT_TIMEOUT):g}s{only}): {entry.get('sql')}"
    )


def perform(started) -> dict:
    """Run the job's statement for this started run."""
    run, job = started.run, started.job
    config = job.target_config or {}
    fire = {
        "fire_key": run.fire_key,
        "scheduled_at": run.scheduled_at,
        "attempt": run.attempt,
        "tenant": started.tenant,
    }
    try:
        return run_statement(
            config.get("name", ""),
            config.get("params") or {},
            config=app_settings.SQL,
            databases=settings.DATABASES,
            fire=fire,
            job_timeout=job.timeout_seconds,
            max_bytes=app_settings.RESULT_MAX_BYTES,
        )
    except InvalidSql as exc:
        raise PermanentFailure(f"invalid_sql: sql.{exc.field}: {exc.message}") from None
    except StatementError as exc:
        raise (RetryableFailure if exc.retryable else PermanentFailure)(str(exc)) from None
