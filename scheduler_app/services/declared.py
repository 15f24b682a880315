"""Schedules as code: jobs declared in a TOML file (CRONFLEET_SCHEDULES_FILE, or --file) or in
the SCHEDULES of a Django app's `schedules.py`, grouped by owner, kept in step with the
database by a plan (what would change) and an apply (exactly that, in one transaction).

A managed job carries its owner (Job.managed_by) and the digest of its fields as last
applied (Job.managed_digest); a job whose fields no longer match that digest was edited
outside its declaration (drift). The format and the commands: docs/schedules-as-code.md.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import UTC, datetime
from pathlib import Path

from django.apps import apps
from django.db import transaction

from scheduler_app import taskapi
from scheduler_app.conf import app_settings
from scheduler_app.models import AuditEvent, Job, Tenant, db_now
from scheduler_app.models.lifecycle import job_pause
from scheduler_app.services import declared_bounds
from scheduler_app.services.declaredproblems import every_problem
from scheduler_app.services.declaredscope import managed_in, outside_scope, quota_problems
from scheduler_app.services.edits import (
    SPEC_FIELDS,
    job_spec_of,
    job_update,
    job_update_impact,
    managed_actor,
    plan_edit,
)
from scheduler_app.services.jobs import job_create, job_delete, job_resume
from scheduler_app.services.jobspec import JobSpec, lock_queues, validate_spec
from scheduler_app.validation import MAX_DEPTH, InvalidInput, check_name

# Keys of a group (the top level of a file is one) and of a job besides JobSpec's fields.
GROUP_KEYS = frozenset({"owner", "tenant", "jobs", "groups"})
# Short names a declaration may use for JobSpec fields (as the API's target says "task").
ALIASES = {"task": "task_name", "window": "flex_window", "window_scope": "flex_scope"}
PRUNE_NOTE = "schedules: no longer declared (owner {owner})"
SHOW_FIRES = 3
DEFAULTS = JobSpec(name="")


class DeclarationError(InvalidInput):
    """Bad declarations: every problem found, each naming its source, job and field."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("declaration", "; ".join(problems))


class PlanMoved(InvalidInput):
    """The database or the declarations changed since the plan whose fingerprint was given."""


@dataclass
class Declared:
    source: str  # "schedules.toml" or "billing.schedules"
    owner: str
    tenant: str
    spec: JobSpec
    raw: dict  # as written (canonical JSON of it goes into the fingerprint)

    @property
    def key(self) -> tuple[str, str]:
        return self.tenant, self.spec.name

    @property
    def label(self) -> str:
        return f"{self.tenant}/{self.spec.name}"


@dataclass
class Declarations:
    """What a file and the apps declare: the jobs, and the scope they are declared in, each
    (owner, tenant) a job is declared under or a group with no jobs names (with the source
    naming it first). Plan and apply touch an owner's jobs in the tenants of its scope only."""

    jobs: list[Declared] = field(default_factory=list)
    scope: dict[tuple[str, str], str] = field(default_factory=dict)

    def add_job(self, item: Declared) -> None:
        self.jobs.append(item)
        self.scope.setdefault((item.owner, item.tenant), item.source)

    def add(self, other: Declarations) -> None:
        self.jobs += other.jobs
        for pair, source in other.scope.items():
            self.scope.setdefault(pair, source)


# --- reading declarations ------------------------------------------------------------------


def read_file(path: str | Path) -> Declarations:
    path = Path(path)
    try:
        text = declared_bounds.read_text(path)
    except OSError as exc:
        raise DeclarationError([f"{path}: cannot be read ({exc.strerror or exc})"]) from None
    except declared_bounds.TooLarge as exc:
        raise DeclarationError([f"{path}: {exc}"]) from None
    except UnicodeDecodeError as exc:
        raise DeclarationError([f"{path}: is not valid UTF-8 (byte {exc.start})"]) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise DeclarationError([f"{path}: not valid TOML: {exc}"]) from None
    except RecursionError:
        raise DeclarationError([f"{path}: {deep_problem(text)}"]) from None
    return read_groups(str(path), data)


def deep_problem(text: str) -> str:
    """Where a text too deep for tomllib nests past MAX_DEPTH, in the words of read_job."""
    deep = declared_bounds.find_deep(text)
    bound = f"must not nest deeper than {MAX_DEPTH} levels"
    if deep is None:
        return f"{bound} (arrays and inline tables)"
    where = f"job {deep.name!r}" if deep.name is not None else (deep.table or "the top level")
    return f"{where}: {deep.key or '(value)'}: {bound} (line {deep.line})"


def app_modules() -> list[tuple[str, dict]]:
    """(module name, SCHEDULES) of each installed app's `schedules` module that has one, then
    the periodic django.tasks declarations (taskapi.periodic_groups), but a module's group
    that declares none in a tenant that does not exist (nothing of it to prune there)."""
    found = []
    for config in apps.get_app_configs():
        name = f"{config.name}.schedules"
        if importlib.util.find_spec(name) is None:
            continue
        value = getattr(importlib.import_module(name), "SCHEDULES", None)
        if value is not None:
            found.append((name, value))
    groups = taskapi.periodic_groups()
    empty = {group["tenant"] for _, group in groups if "jobs" not in group}
    existing = set(Tenant.objects.filter(slug__in=empty).values_list("slug", flat=True)) if empty else set()
    return found + [(source, group) for source, group in groups if "jobs" in group or group["tenant"] in existing]


def check_something_declared(path: str | Path | None = None) -> None:
    """InvalidInput naming `file` when there is nowhere to read declarations from: no `path`,
    no CRONFLEET_SCHEDULES_FILE and no app with a `schedules.py` declaring SCHEDULES. A plan
    of nothing would read "No changes" and an apply would do nothing, whatever the database
    holds: a missing setting must not look like a clean plan. (An empty file is a declaration:
    of no jobs.)"""
    if not (path or app_settings.SCHEDULES_FILE) and not app_modules():
        raise InvalidInput(
            "file",
            "nothing declared: give --file or set CRONFLEET_SCHEDULES_FILE "
            "(or declare SCHEDULES in an app's schedules.py)",
        )


def read_all(path: str | Path | None = None) -> Declarations:
    """The declarations of `path` (else CRONFLEET_SCHEDULES_FILE, when set) and of the apps'
    `schedules.py` modules, checked for duplicates."""
    path = path or app_settings.SCHEDULES_FILE
    found = read_file(path) if path else Declarations()
    problems: list[str] = []
    for name, value in app_modules():
        try:
            found.add(read_groups(name, value))
        except DeclarationError as exc:
            problems += exc.problems
    seen: dict[tuple[str, str], Declared] = {}
    for item in found.jobs:
        if item.key in seen:
            problems.append(
                f"{item.source}: job {item.label}: declared twice (also in {seen[item.key].source}, "
                f"owner {seen[item.key].owner})"
            )
        seen.setdefault(item.key, item)
    if problems:
        raise DeclarationError(problems)
    return found


def read_groups(source: str, data, owner: str = "", tenant: str = "", depth: int = 1) -> Declarations:
    """The jobs of a group (a dict with owner, tenant, jobs and nested groups), inheriting the
    owner and tenant of the groups around it. A group that declares no job at all (neither
    jobs nor groups) names its owner and tenant all the same: they are in scope, with none."""
    if not isinstance(data, dict):
        raise DeclarationError([f"{source}: must be a table (dict) with owner, tenant and jobs"])
    if depth > MAX_DEPTH:
        raise DeclarationError([f"{source}: groups: must not nest deeper than {MAX_DEPTH} levels"])
    unknown = sorted(set(data) - GROUP_KEYS)
    if unknown:
        raise DeclarationError([f"{source}: {unknown[0]}: unknown key (a group has {', '.join(sorted(GROUP_KEYS))})"])
    owner, tenant = data.get("owner", owner), data.get("tenant", tenant)
    found, problems = Declarations(), []
    jobs = data.get("jobs", [])
    if not isinstance(jobs, list):
        problems.append(f"{source}: jobs: must be an array of tables ([[jobs]])")
        jobs = []
    for index, raw in enumerate(jobs, 1):
        try:
            found.add_job(read_job(source, index, raw, owner, tenant))
        except DeclarationError as exc:
            problems += exc.problems
    groups = data.get("groups", [])
    for group in groups if isinstance(groups, list) else [groups]:
        try:
            found.add(read_groups(source, group, owner, tenant, depth + 1))
        except DeclarationError as exc:
            problems += exc.problems
    if not jobs and not groups and all(isinstance(value, str) and value for value in (owner, tenant)):
        found.scope.setdefault((owner, tenant), source)
    if problems:
        raise DeclarationError(problems)
    return found


def read_job(source: str, index: int, raw, owner: str, tenant: str) -> Declared:
    if not isinstance(raw, dict):
        raise DeclarationError([f"{source}: job #{index}: must be a table"])
    name = raw.get("name")
    label = f"job {name!r}" if isinstance(name, str) and len(name) <= 200 else f"job #{index}"
    try:
        declared_bounds.check_job(raw)
    except InvalidInput as exc:
        raise DeclarationError([f"{source}: {label}: {exc.field}: {exc.message}"]) from None
    raw = dict(raw)
    owner, tenant = raw.pop("owner", owner), raw.pop("tenant", tenant)

    def problem(name: str, message: str) -> DeclarationError:
        return DeclarationError([f"{source}: {label}: {name}: {message}"])

    for name, value in (("owner", owner), ("tenant", tenant)):
        if not isinstance(value, str) or not value:
            raise problem(name, "missing: set it on the job or on its group")
    try:
        check_name("owner", owner, max_length=100 - len("schedules:"))
    except InvalidInput as exc:
        raise problem("owner", exc.message) from None
    values = {ALIASES.get(key, key): value for key, value in raw.items()}
    unknown = sorted(set(values) - SPEC_FIELDS - {"target_kind"})
    if unknown:
        raise DeclarationError([f"{source}: {label}: {key}: is not a job field" for key in unknown])
    if "name" not in values:
        raise problem("name", "missing")
    for kind in ("http", "command", "sql"):
        if values.get(kind) is not None:
            values.setdefault("target_kind", kind)
    values = {key: to_utc(value) for key, value in values.items()}
    return Declared(
        source=source, owner=owner, tenant=tenant, spec=JobSpec(**values), raw={"owner": owner, "tenant": tenant, **raw}
    )


def to_utc(value):
    """TOML's local date-times (no offset) are refused by validation; aware ones go to UTC."""
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.astimezone(UTC)
    return value


# --- digests -------------------------------------------------------------------------------


def canonical(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=lambda v: v.isoformat())


def job_digest(job: Job) -> str:
    """The digest of everything a declaration can set on `job`, as it is saved (every JobSpec
    field). Fields at their default are left out, so a field added to JobSpec later does not
    change the digests of the jobs applied before it (which would read as drift)."""
    spec = job_spec_of(job)
    values = {f.name: getattr(spec, f.name) for f in fields(spec)}
    return hashlib.sha256(
        canonical({name: value for name, value in values.items() if value != getattr(DEFAULTS, name)}).encode()
    ).hexdigest()


def drifted_fields(job: Job) -> list[str]:
    """The fields changed by edits made outside the declaration since its last apply (from the
    audit: the changes of job.updated events by any other actor)."""
    own = managed_actor(job.managed_by)
    events = AuditEvent.objects.filter(job=job, action__in=("job.updated", "job.created")).order_by("id")
    found: list[str] = []
    for event in events:
        if event.actor == own:
            found = []
        elif event.action == "job.updated":
            found += [key for key in event.detail.get("changes", {}) if key not in found]
    return found


# --- the plan ------------------------------------------------------------------------------


@dataclass
class Step:
    action: str  # create, change, remove, unchanged
    owner: str
    label: str
    declared: Declared | None = None
    job: Job | None = None
    diff: dict = field(default_factory=dict)  # field -> [old, new]
    drift: list[str] = field(default_factory=list)  # fields edited outside the declaration
    adopted: str = ""  # a job made by hand that the declaration takes over
    fires_before: list[datetime] = field(default_factory=list)
    fires_after: list[datetime] = field(default_factory=list)
    digest_only: bool = False  # drifted back to the declaration: only its digest is written


@dataclass
class Plan:
    owners: list[str]
    steps: list[Step]
    fingerprint: str
    scope: list[tuple[str, str]] = field(default_factory=list)  # (owner, tenant): the jobs it may touch
    warnings: list[str] = field(default_factory=list)  # jobs of the owners outside the scope, left alone

    def of(self, action: str) -> list[Step]:
        return [step for step in self.steps if step.action == action]

    @property
    def drifted(self) -> list[Step]:
        return [step for step in self.steps if step.drift]

    @property
    def to_do(self) -> list[Step]:
        return [step for step in self.steps if step.action != "unchanged"]


def in_scope(declarations: Declarations, owner: str | None) -> tuple[list[Declared], dict[tuple[str, str], str]]:
    """The jobs and the (owner, tenant) scope of `owner`, else of every owner declared."""
    if owner is None:
        return declarations.jobs, declarations.scope
    jobs = [item for item in declarations.jobs if item.owner == owner]
    return jobs, {pair: source for pair, source in declarations.scope.items() if pair[0] == owner}


def make_plan(declarations: Declarations, *, owner: str | None = None, prune: str = "pause") -> Plan:
    """What apply would do for the owners in scope (`owner`, else every owner declared), each
    in the tenants it is declared in. Refuses (DeclarationError, before planning a job) a plan
    that would leave a tenant over its max_jobs."""
    now = db_now()
    declared, scope = in_scope(declarations, owner)
    owners = sorted({pair[0] for pair in scope} | ({owner} if owner else set()))
    tenants = {tenant.slug: tenant for tenant in Tenant.objects.filter(slug__in={pair[1] for pair in scope})}
    with_jobs = {(item.owner, item.tenant) for item in declared}
    problems = [
        f"{source}: group of owner {name!r}: tenant: no tenant {slug!r}"
        for (name, slug), source in sorted(scope.items())
        if slug not in tenants and (name, slug) not in with_jobs
    ]
    keys = {item.key for item in declared}
    leftover = managed_in(scope).select_related("tenant").order_by("tenant__slug", "name")
    removals = [job for job in leftover if (job.tenant.slug, job.name) not in keys]
    problems += quota_problems(declared, tenants, removals if prune == "delete" else [])
    if problems:  # before planning a job: a plan over quota may declare many thousands
        raise DeclarationError(problems)
    steps: list[Step] = []
    for item in declared:
        try:
            steps.append(plan_declared(item, tenants, now))
        except InvalidInput as exc:

            def check(spec: JobSpec, item: Declared = item) -> Step:
                return plan_declared(replace(item, spec=spec), tenants, now)

            problems += [
                f"{item.source}: job {item.label}: {found.field}: {found.message}"
                for found in every_problem(exc, item.spec, check)
            ]
    if problems:
        raise DeclarationError(problems)
    for job in removals:
        if prune == "pause" and not job.enabled and job.paused_note == PRUNE_NOTE.format(owner=job.managed_by):
            continue  # removed and paused by an earlier apply
        steps.append(
            Step(
                "remove",
                job.managed_by,
                f"{job.tenant.slug}/{job.name}",
                job=job,
                drift=drifted_fields(job) if job_digest(job) != job.managed_digest else [],
            )
        )
    pairs = sorted(scope)
    return Plan(
        owners=owners,
        steps=steps,
        fingerprint=fingerprint(owners, pairs, declared, steps, prune),
        scope=pairs,
        warnings=outside_scope(owners, scope),
    )


def plan_declared(item: Declared, tenants: dict[str, Tenant], now: datetime) -> Step:
    tenant = tenants.get(item.tenant)
    if tenant is None:
        raise InvalidInput("tenant", f"no tenant {item.tenant!r}")
    job = Job.objects.filter(tenant=tenant, name=item.spec.name).select_related("tenant").first()
    if job is None:
        validate_spec(tenant, item.spec, now)
        return Step("create", item.owner, item.label, declared=item)
    if job.managed_by and job.managed_by != item.owner:
        raise InvalidInput(
            "owner",
            f"the job is managed by owner {job.managed_by!r}: declare it under that owner, "
            "or remove it from that owner's declarations (apply --prune delete) first",
        )
    changes = spec_changes(item.spec)
    edit = plan_edit(job, changes, now)
    step = Step("change", item.owner, item.label, declared=item, job=job, diff=edit.diff)
    if not job.managed_by:
        step.adopted = "made by hand until now: the declaration takes it over"
    elif job_digest(job) != job.managed_digest:
        step.drift = drifted_fields(job) or sorted(edit.diff) or ["(unknown: the digest differs)"]
    paused_by_prune = not job.enabled and job.paused_note == PRUNE_NOTE.format(owner=item.owner)
    if paused_by_prune:
        step.diff = {**step.diff, "enabled": [False, True]}
    if not step.diff and not step.adopted:
        step.action = "unchanged" if not step.drift else "change"
        step.digest_only = bool(step.drift)
        return step
    if edit.diff:
        impact = job_update_impact(job, changes, count=SHOW_FIRES)
        step.fires_before, step.fires_after = impact["next_before"], impact["next_after"]
    return step


def spec_changes(spec: JobSpec) -> dict:
    """Every field of a declared spec: what the declaration leaves out takes JobSpec's default."""
    return {f.name: getattr(spec, f.name) for f in fields(spec)}


def fingerprint(
    owners: list[str], scope: list[tuple[str, str]], declared: list[Declared], steps: list[Step], prune: str
) -> str:
    """Of the declarations in scope and of the rows the plan read (each job's id and version,
    whether it is enabled and its managed columns): any change to either changes it."""
    rows = sorted(
        [step.job.id, step.job.version, step.job.enabled, step.job.managed_by, step.job.managed_digest]
        for step in steps
        if step.job is not None
    )
    text = canonical(
        {
            "owners": owners,
            "scope": scope,
            "prune": prune,
            "rows": rows,
            "declared": sorted(canonical(item.raw) for item in declared),
        }
    )
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# --- apply ---------------------------------------------------------------------------------


@dataclass
class Applied:
    plan: Plan
    created: int = 0
    changed: int = 0
    paused: int = 0
    deleted: int = 0
    overwritten: list[str] = field(default_factory=list)  # labels of drifted jobs set back


def apply_plan(
    declarations: Declarations, *, owner: str | None = None, prune: str = "pause", expected: str | None = None
) -> Applied:
    """Do what make_plan says, in one transaction, through the services (validated, audited,
    the beats woken); refuse, writing nothing, when `expected` is not the plan's fingerprint.
    Removals go first, so a plan that deletes as many jobs as it creates fits a full quota."""
    if prune not in ("pause", "delete"):
        raise InvalidInput("prune", "must be pause or delete")
    with transaction.atomic():
        # The managed rows in scope are locked first, so the plan read here is the one applied.
        jobs, scope = in_scope(declarations, owner)
        list(managed_in(scope).select_for_update(of=("self",)).values_list("id", flat=True))
        # Every dedicated queue a declaration names, at once and in order (not one by one as
        # each job is saved): two applies naming the same fresh queues never deadlock.
        lock_queues(item.spec.queue for item in jobs)
        plan = make_plan(declarations, owner=owner, prune=prune)
        if expected is not None and expected != plan.fingerprint:
            raise PlanMoved(
                "fingerprint",
                f"the plan was {expected} but is now {plan.fingerprint}: the database or "
                "the declarations changed since; nothing applied, run plan again",
            )
        done = Applied(plan=plan)
        for step in sorted(plan.to_do, key=lambda step: step.action != "remove"):
            apply_step(step, prune, done)
    return done


def apply_step(step: Step, prune: str, done: Applied) -> None:
    # make_plan's steps: a create has its declaration, a change that and its job, a remove its job.
    actor = managed_actor(step.owner)
    if step.action == "create":
        assert step.declared is not None
        tenant = Tenant.objects.get(slug=step.declared.tenant)
        job = job_create(tenant, step.declared.spec, actor=actor)
        mark(job, step.owner)
        done.created += 1
    elif step.action == "change":
        assert step.declared is not None and step.job is not None
        job = step.job
        if not job.managed_by:
            Job.objects.filter(id=job.id).update(managed_by=step.owner)
            job.managed_by = step.owner
        changes = spec_changes(step.declared.spec)
        if plan_edit(job, changes, db_now()).diff:
            job = job_update(job, changes, actor=actor)
        if "enabled" in step.diff:
            job = job_resume(job, actor=actor)
        mark(job, step.owner)
        done.changed += 1
        if step.drift:
            done.overwritten.append(step.label)
    elif prune == "delete":
        assert step.job is not None
        job_delete(step.job, actor=actor)
        done.deleted += 1
    else:
        assert step.job is not None
        job_pause(step.job, note=PRUNE_NOTE.format(owner=step.owner), actor=actor)
        done.paused += 1


def mark(job: Job, owner: str) -> None:
    job.refresh_from_db()
    Job.objects.filter(id=job.id).update(managed_by=owner, managed_digest=job_digest(job))


# --- writing declarations ------------------------------------------------------------------

# The order a job's keys are written in; the others follow in JobSpec's order.
FIRST_KEYS = ("name", "cron", "timezone", "every", "at", "task_name", "args", "kwargs")


def spec_table(spec: JobSpec) -> dict:
    """A job's table in a declaration: its name and the fields that differ from the defaults."""
    order = [*FIRST_KEYS, *(f.name for f in fields(spec) if f.name not in FIRST_KEYS)]
    table = {}
    for name in order:
        value = getattr(spec, name)
        if name != "name" and (value == getattr(DEFAULTS, name) or value in (None, [], {})):
            continue
        if name == "target_kind":
            continue  # said by http, command or sql
        table["task" if name == "task_name" else name] = value
    return table


def to_toml(data: dict, *, comments: Sequence[str] = ()) -> str:
    """A group (owner, tenant, jobs) as TOML that read_file reads back."""
    lines = [f"# {line}" for line in comments]
    lines += [f"{toml_key(key)} = {toml_value(value)}" for key, value in data.items() if key != "jobs"]
    for job in data.get("jobs", []):
        lines += ["", "[[jobs]]", *(f"{toml_key(key)} = {toml_value(value)}" for key, value in job.items())]
    return "\n".join(lines) + "\n"


def toml_key(key: str) -> str:
    return key if key and all(char.isalnum() or char in "-_" for char in key) and key.isascii() else json.dumps(key)


def toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string: JSON's escapes are TOML's
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat()
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{toml_key(str(key))} = {toml_value(item)}" for key, item in value.items()) + "}"
    raise ValueError(f"{value!r} has no TOML form")
