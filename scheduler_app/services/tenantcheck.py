"""What `tenants import` checks of a tenant's document before it writes anything (docs/scaling.md).

A document is text someone could have edited, so each of its objects is held to what the API
and the services hold a new one to, under this cell's settings: the tenant (slug, name, zone,
quotas and weight), its calendars, maintenance windows, jobs (validate_spec: the target, the
schedule and the tenant's min_interval_seconds, the bounds of every field; max_jobs over the
document's jobs), each job's alert rule and check-in key, and its API keys (the form
apikey_create makes them in; CRONFLEET_MAX_API_KEYS_PER_TENANT). Every column is read within
its range first (tenantmove.columns_of). The validators are the services' own, called here
without their writes; the problems of the whole document come back at once (up to
MAX_PROBLEMS), each naming the object and the field, and nothing is written.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from datetime import datetime

from django.core.exceptions import ValidationError
from django.db import models

from scheduler_app.alerts.rules import RULE_FIELDS, validate_rule
from scheduler_app.cells import CELL_NAME
from scheduler_app.http import signing
from scheduler_app.models import AlertRule, ApiKey, Calendar, Job, MaintenanceWindow, Monitor, Tenant
from scheduler_app.services import flexible
from scheduler_app.services.calendars import CALENDAR_FIELDS, check_calendar_fields
from scheduler_app.services.chains import MAX_CHAIN_DEPTH
from scheduler_app.services.edits import job_spec_of
from scheduler_app.services.jobspec import check_job_count, validate_spec
from scheduler_app.services.keys import check_key_count, check_key_record
from scheduler_app.services.tenants import TENANT_LIMITS, check_slug, check_tenant_limit, check_timezone
from scheduler_app.services.windows import WINDOW_FIELDS, check_window_fields
from scheduler_app.targets import task as task_target
from scheduler_app.validation import InvalidInput, check_line, check_name

MAX_PROBLEMS = 50  # a document edited wholesale is refused with this many named, and a count of the rest
# The webhook signing secrets, written apart from the row in clear: each cell encrypts them with
# its own keys. Column -> document key.
SECRETS = {"webhook_secret_encrypted": "webhook_secret", "webhook_secret_previous_encrypted": "webhook_secret_previous"}


# --- rows ----------------------------------------------------------------------------------


def columns_of(model: type[models.Model], row, where: str) -> dict:
    """A document row as `model`'s column values; a column this cell does not have is refused,
    naming it (a document from a newer Cronfleet), one it has but the row lacks takes its default."""
    if not isinstance(row, dict):
        raise InvalidInput(where, "must be an object")
    known = {
        field.attname: field for field in model._meta.concrete_fields if not field.primary_key and not field.is_relation
    }
    unknown = sorted(set(row) - set(known))
    if unknown:
        raise InvalidInput(f"{where}.{unknown[0]}", f"is not a column of {model.__name__} in this cell")
    return {name: column_value(known[name], value, f"{where}.{name}") for name, value in row.items()}


def column_value(field: models.Field, value, where: str):
    """`value` as `field` holds it, within the column's range (a smallint's, a varchar's length:
    the field's own validators), or InvalidInput naming the column: never the database's error."""
    try:
        value = field.to_python(value)
        if value is not None:
            field.run_validators(value)
    except ValidationError as exc:
        raise InvalidInput(where, " ".join(exc.messages)) from None
    except Exception as exc:  # noqa: BLE001 - the parsers' own errors
        raise InvalidInput(where, f"bad value: {exc}") from None
    return value


def rows(document: dict, key: str) -> list:
    value = document.get(key, [])
    if not isinstance(value, list):
        raise InvalidInput(key, "must be a list")
    return value


def run_rows(document: dict) -> Iterable:
    """The document's runs: a list, or a file's runs read as they are used (documentfile.FileRuns)."""
    value = document.get("runs", [])
    if isinstance(value, (str, bytes, dict)) or not isinstance(value, Iterable):
        raise InvalidInput("runs", "must be a list")
    return value


# --- the checks ----------------------------------------------------------------------------


class DocumentRefused(InvalidInput):
    """The document's problems (`problems`, each an InvalidInput naming its object and field).
    One problem reads as that problem; several, one line each."""

    def __init__(self, problems: list[InvalidInput], more: int = 0) -> None:
        self.problems, self.more = problems, more
        if len(problems) == 1 and not more:
            super().__init__(problems[0].field, problems[0].message)
            return
        lines = [f"  {problem.field}: {problem.message}" for problem in problems]
        if more:
            lines.append(f"  ... and {more} more")
        super().__init__("document", f"{len(problems) + more} problems, nothing imported:\n" + "\n".join(lines))


class Problems:
    def __init__(self) -> None:
        self.found: list[InvalidInput] = []
        self.more = 0
        self.failed = False  # whether the last `checking` block failed

    def add(self, field: str, message: str) -> None:
        if len(self.found) < MAX_PROBLEMS:
            self.found.append(InvalidInput(field, message))
        else:
            self.more += 1

    @contextlib.contextmanager
    def checking(self, label: str = "") -> Iterator[None]:
        """Note the InvalidInput the block raises, its field after `label` (the object's name)."""
        self.failed = False
        try:
            yield
        except InvalidInput as exc:
            self.failed = True
            self.add(f"{label}: {exc.field}" if label else exc.field, exc.message)

    def raise_any(self) -> None:
        if self.found:
            raise DocumentRefused(self.found, self.more)


def check_document(document: dict, now: datetime) -> dict:
    """Check every object of `document` (see the module); return the tenant's columns."""
    problems = Problems()
    tenant_row: dict = {}
    with problems.checking():
        tenant_row = columns_of(Tenant, document.get("tenant"), "tenant")
    if problems.failed:
        problems.raise_any()
    tenant = Tenant(**tenant_row)
    check_tenant(problems, tenant)
    check_secrets(problems, document)
    # The jobs are checked as the tenant's once it is active here (the export left it inactive).
    active = Tenant(**{**tenant_row, "is_active": True})
    calendars = check_calendars(problems, rows(document, "calendars"))
    check_windows(problems, rows(document, "windows"))
    check_jobs(problems, active, rows(document, "jobs"), calendars, now)
    check_keys(problems, active, rows(document, "api_keys"))
    problems.raise_any()
    return tenant_row


def check_tenant(problems: Problems, tenant: Tenant) -> None:
    label = f"tenant {tenant.slug!r}"
    checks: list[Callable[[], object]] = [
        lambda: check_slug(tenant.slug),
        lambda: check_name("name", tenant.name),
        lambda: check_timezone(tenant.timezone),
        *[lambda key=key: check_tenant_limit(key, getattr(tenant, key)) for key in TENANT_LIMITS],
    ]
    for check in checks:
        with problems.checking(label):
            check()


def check_secrets(problems: Problems, document: dict) -> None:
    """Each webhook signing secret the document gives in the form `tenants rotate-secret` makes
    (whsec_ and base64 of at least 24 bytes); the message never holds the secret."""
    for key in SECRETS.values():
        if document.get(key):
            try:
                signing.parse_secret(document[key])
            except ValueError as exc:
                problems.add(key, str(exc))


def named(problems: Problems, kind: str, where: str, name, seen: set) -> str:
    """The label of a document's object by its name (`job 'nightly'`), a repeated name noted."""
    label = f"{kind} {name!r}"
    if name in seen:
        problems.add(f"{where}.name", f"{label} is in the document twice")
    seen.add(name)
    return label


def check_calendars(problems: Problems, calendar_rows: list) -> set[str]:
    return check_named_rows(
        problems, Calendar, "calendars", "calendar", calendar_rows, CALENDAR_FIELDS, check_calendar_fields
    )


def check_windows(problems: Problems, window_rows: list) -> None:
    check_named_rows(problems, MaintenanceWindow, "windows", "window", window_rows, WINDOW_FIELDS, check_window_fields)


def check_named_rows(
    problems: Problems, model: type[models.Model], key: str, kind: str, document_rows: list, fields, check: Callable
) -> set[str]:
    """The document's `key` rows (calendars, windows) read as `model`s, each named once and
    checked on `fields` by `check`, its service's own; the names read."""
    names: set[str] = set()
    for i, row in enumerate(document_rows):
        with problems.checking():
            item = model(**columns_of(model, row, f"{key}[{i}]"))
        if problems.failed:
            continue
        label = named(problems, kind, f"{key}[{i}]", item.name, names)
        with problems.checking(label):
            check_name("name", item.name, max_length=64)
        with problems.checking(label):
            check({field: getattr(item, field) for field in fields})
    return names


def check_jobs(problems: Problems, tenant: Tenant, job_rows: list, calendars: set[str], now) -> None:
    """Each job as validate_spec checks a new one (its chained parent among the document's
    jobs), its alert rule and check-in key; no more jobs than max_jobs, no chain in a loop."""
    jobs: dict[str, Job] = {}
    parents: dict[str, str] = {}
    extras = []
    for i, raw in enumerate(job_rows):
        where = f"jobs[{i}]"
        if not isinstance(raw, dict):
            problems.add(where, "must be an object")
            continue
        raw = dict(raw)
        calendar, parent = raw.pop("calendar", ""), raw.pop("after_job", "")
        ping, rule = (raw.pop("ping_key", None), raw.pop("ping_cell", "")), raw.pop("alert_rule", None)
        if calendar and calendar not in calendars:
            problems.add(f"{where}.calendar", f"no calendar {calendar!r} in the document")
        with problems.checking():
            job = Job(**columns_of(Job, raw, where))
        if problems.failed:
            continue
        label = named(problems, "job", where, job.name, set(jobs))
        jobs[job.name] = job
        if parent:
            parents[job.name] = parent
        extras.append((job, where, label, parent, ping, rule))
    for job, where, label, parent, ping, rule in extras:
        if parent and parent not in jobs:
            problems.add(f"{where}.after_job", f"job {job.name!r} follows {parent!r}, not in the document")
            continue
        with problems.checking(label):
            check_job(tenant, job, parent, jobs, now)
        if rule is not None:
            with problems.checking(f"{label} alert_rule"):
                check_rule(columns_of(AlertRule, rule, f"{where}.alert_rule"))
        if ping[0]:
            with problems.checking(label):
                check_ping(columns_of(Monitor, {"ping_key": ping[0], "cell": ping[1]}, f"{where}.ping"))
    try:
        check_job_count(tenant, len(job_rows) - 1)  # the last job would join the others
    except InvalidInput as exc:
        problems.add("jobs", f"{len(job_rows)} jobs: {exc.message}")
    check_loops(problems, parents)


def check_job(tenant: Tenant, job: Job, parent: str, jobs: dict[str, Job], now: datetime) -> None:
    """The job's row as a new job of `tenant` by validate_spec. Its calendar is the document's
    (checked by name); the kept bounds are those of a saved job: an end or a one-off instant
    since passed is no error (the old cell fired it), nor a flexible job's placement."""
    spec = replace(job_spec_of(job), after_job=parent)
    placement = flexible.Placement(cron=job.cron, note=job.flex_note) if job.flex_window else None
    validate_spec(
        tenant,
        spec,
        now,
        anchor=job.anchor_at,
        jitter_seed=job.jitter_seed,
        check_schedule_quota=job.run_at is None,
        check_end=False,
        flex_kept=placement,
        # A task staff chose in the admin beyond the allow-list must still be one this cell's
        # Celery app registers, as the admin's form requires of staff.
        allow_any_registered=task_target.chosen_in_admin(job),
        parents=jobs,
    )
    check_line("paused_note", job.paused_note)


def check_rule(columns: dict) -> None:
    validate_rule({name: value for name, value in columns.items() if name in RULE_FIELDS})


def check_ping(columns: dict) -> None:
    cell = columns.get("cell") or ""
    if cell and not re.fullmatch(CELL_NAME, cell):
        raise InvalidInput("ping_cell", f"{cell!r} is not a cell name ({CELL_NAME})")


def check_loops(problems: Problems, parents: dict[str, str]) -> None:
    """No chain of the document leads back to itself (nor deeper than chains allow); each job
    of a loop is named with it, a job that only leads into one is not."""
    for name in parents:
        path, seen = [name], {name}
        while path[-1] in parents and len(path) <= MAX_CHAIN_DEPTH:
            path.append(parents[path[-1]])
            if path[-1] in seen:
                break
            seen.add(path[-1])
        if path[-1] == name and len(path) > 1:
            problems.add(f"job {name!r}: after_job", f"makes a loop: {' -> '.join(path)}")
        elif len(path) > MAX_CHAIN_DEPTH and path[-1] not in path[:-1]:
            problems.add(f"job {name!r}: after_job", f"chains may be at most {MAX_CHAIN_DEPTH} jobs deep")


def check_keys(problems: Problems, tenant: Tenant, key_rows: list) -> None:
    """Each key of the form apikey_create makes; no prefix twice; at most
    CRONFLEET_MAX_API_KEYS_PER_TENANT unrevoked."""
    prefixes: set[str] = set()
    active = 0
    for i, row in enumerate(key_rows):
        with problems.checking():
            key = ApiKey(**columns_of(ApiKey, row, f"api_keys[{i}]"))
        if problems.failed:
            continue
        label = f"api key {key.prefix!r}"
        with problems.checking(label):
            check_key_record(key)
        if key.prefix in prefixes:
            problems.add(f"{label}: prefix", "is in the document twice")
        prefixes.add(key.prefix)
        if key.revoked_at is None:
            with problems.checking(label):
                check_key_count(tenant, active)
            active += 1
