"""Moving a tenant between cells (docs/scaling.md): `tenants export` in the old cell, `tenants
import` in the new one, with a cut both agree on.

The cut is an instant C on the jobs' nominal fire times (before jitter; a calendar's moved fires
by the time they were moved from). Every fire before C belongs to the old cell, every fire at
or after C to the new one, so none is lost and none runs twice whichever cell's beats run
ahead or behind:

- The export, in one transaction that locks the tenant's jobs, writes the document (the
  tenant, its calendars, maintenance windows, jobs with their check-in keys and alert rules,
  API keys, and with `with_runs` its finished runs before C) and fences the old cell: each
  job's `end_at` becomes at most C - 1 µs (both bounds are inclusive) and its next fire is
  taken again under that bound, and the tenant is made inactive there (its API keys stop
  working, its jobs can no longer be created or edited; the jobs still fire up to C). It
  refuses a cut that is not after the database's now (a fire at or after C might be recorded
  already) and a tenant exported before.
- The import creates it all in the new cell, each job starting at C: a cron or one-off job's
  `start_at` becomes at least C, an interval's origin moves to its first point at or after C
  on the same grid, and `next_run_at` is the first fire from there. Before C the new cell's
  beats have nothing of the tenant's to fire. It refuses a cut already past in the new cell
  (the fires from C until now would be missed) unless `late`, when they are fired by each
  job's misfire policy as after any outage.

The document carries the tenant's webhook signing secrets in clear (each cell encrypts with
its own keys) and its API key hashes and check-in keys, which keep working in the new cell:
it is a secret, written owner-only by the command.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from datetime import datetime, timedelta
from typing import IO, TextIO

from django.core.serializers.json import DjangoJSONEncoder
from django.db import IntegrityError, connection, models, transaction
from django.utils.dateparse import parse_datetime

from scheduler_app import schedules
from scheduler_app.dispatch import pgarrays
from scheduler_app.dispatch.waker import wake_beats
from scheduler_app.http import secrets as crypto
from scheduler_app.models import (
    TERMINAL_STATES,
    AlertRule,
    ApiKey,
    AuditEvent,
    Calendar,
    Job,
    JobRun,
    MaintenanceWindow,
    Monitor,
    Tenant,
    db_now,
)
from scheduler_app.services import documentmac
from scheduler_app.services.jobspec import check_queue_tenant
from scheduler_app.services.tenantcheck import SECRETS, check_document, columns_of, rows, run_rows
from scheduler_app.validation import InvalidInput

FORMAT = "cronfleet-tenant/1"
TICK = timedelta(microseconds=1)
EXPORTED = "tenant.exported"
IMPORTED = "tenant.imported"
RUNS_BATCH = 2000


class RunRows:
    """A document's finished runs, never held whole: `--with-runs` of a tenant with millions
    of runs costs the memory of one batch.

    read() takes them from the database (a server-side cursor, RUNS_BATCH rows at a time)
    into a spool file, one line of JSON a run with its job's id, before the export locks the
    jobs; lines() gives them back naming each run's job (`names`, the document's jobs), so
    the jobs stay locked while the spool is copied into the document, not while the history
    is read. `written` counts the rows the last pass gave out."""

    def __init__(self, runs: models.QuerySet | None) -> None:
        self.runs, self.written = runs, 0
        self.names: dict[int, str] = {}
        self.spool: IO[str] | None = None

    def read(self) -> None:
        if self.runs is None:
            return
        self.close()
        self.spool = tempfile.TemporaryFile("w+", encoding="utf-8")
        for run in self.runs.iterator(chunk_size=RUNS_BATCH):
            self.spool.write(f"{run.job_id} {json.dumps(row_of(run), cls=DocumentEncoder)}\n")

    def lines(self) -> Iterator[str]:
        """Each run as one line of JSON, its job named first. A run whose job is not among
        `names` (deleted since the spool was read, with its runs) is left out."""
        self.written = 0
        if self.runs is None:
            return
        if self.spool is None:
            self.read()
        assert self.spool is not None
        self.spool.seek(0)
        for line in self.spool:
            job_id, row = line.rstrip("\n").split(" ", 1)
            name = self.names.get(int(job_id))
            if name is not None:
                self.written += 1
                yield '{"job": ' + json.dumps(name) + ", " + row[1:]

    def __iter__(self) -> Iterator[dict]:
        return (json.loads(line) for line in self.lines())

    def close(self) -> None:
        if self.spool is not None:
            self.spool.close()
            self.spool = None


class DocumentEncoder(DjangoJSONEncoder):
    """Django's encoder, but instants to the microsecond (it keeps milliseconds): an interval's
    origin must not move."""

    def default(self, o):
        if isinstance(o, datetime):
            return o.isoformat()
        if isinstance(o, RunRows):
            return list(o)
        return super().default(o)


def dumps(document: dict) -> str:
    """The document as one text (what dump() writes reads back the same)."""
    return json.dumps(document, cls=DocumentEncoder, indent=1)


def dump(document: dict, out: TextIO) -> None:
    """Write the document to `out`, its runs one line each as the database gives them out, and
    with CRONFLEET_TENANT_DOCUMENT_KEY set, its MAC after them (services/documentmac.py)."""
    key = documentmac.shared_key()
    sink = documentmac.MacWriter(out, key) if key else out
    head = dumps({**{key: value for key, value in document.items() if key != "runs"}, "runs": []})
    sink.write(head.removesuffix("[]\n}") + "[")  # the runs are the last member
    runs = document["runs"]
    lines = runs.lines() if isinstance(runs, RunRows) else (json.dumps(row, cls=DocumentEncoder) for row in runs)
    for n, line in enumerate(lines):
        sink.write(("," if n else "") + "\n  " + line)
    sink.write("\n ]")
    if isinstance(sink, documentmac.MacWriter):
        sink.seal()
    else:
        out.write("\n}\n")


# --- rows ----------------------------------------------------------------------------------


def row_of(obj: models.Model) -> dict:
    """The columns of `obj` but its id and its relations (which the document names instead)."""
    return {
        field.attname: field.value_from_object(obj)
        for field in obj._meta.concrete_fields
        if not field.primary_key and not field.is_relation and field.attname not in SECRETS
    }


# --- the cut -------------------------------------------------------------------------------


def fenced(job: Job, cut: datetime) -> tuple[datetime, datetime | None]:
    """(end_at, next_run_at) of `job` in the old cell: no nominal fire at or after the cut."""
    end_at = min(job.end_at, cut - TICK) if job.end_at else cut - TICK
    if job.next_run_at is None:
        return end_at, None
    schedule = replace(job.schedule, end_at=end_at)
    return end_at, schedules.next_fire_after(schedule, job.next_run_at - TICK)


def started_at_cut(job: Job, cut: datetime, *, chained: bool) -> None:
    """Start `job` (new, not saved) at the cut: its schedule bounded to nominal fires at or after
    it, the interval's grid kept, and its first fire there as next_run_at."""
    if chained or (job.run_at is not None and job.run_at < cut):
        job.next_run_at = None  # a chained job fires after its parent; a past one-off fired in the old cell
        return
    if job.every_seconds:  # its first point at or after the cut, as the schedule counts them
        first = schedules.next_fire_after(job.schedule.nominal, cut - TICK)
        if first is None:
            job.next_run_at = None
            return
        job.anchor_at = job.start_at = first
    else:
        job.start_at = max(job.start_at, cut) if job.start_at else cut
    if job.end_at is not None and job.end_at < job.start_at:
        job.next_run_at = None
        return
    job.next_run_at = schedules.next_fire_after(job.schedule, cut - TICK)


def straddles(job: Job, cut: datetime) -> bool:
    """Whether `job`'s calendar may move fires from both sides of the cut onto one instant (its
    next_/previous_business_day policy, a non-business day on the cut's local date or next to it):
    that instant would fire in each cell."""
    if not job.calendar_id or job.calendar_policy == "skip":
        return False
    calendar = job.calendar.business_calendar(cut.year)
    day = cut.astimezone(schedules.zone(job.timezone)).date()
    return not all(calendar.is_business_day(day + timedelta(days=offset)) for offset in (-1, 0, 1))


# --- export --------------------------------------------------------------------------------


def tenant_export(
    tenant: Tenant, cut: datetime, *, write: Callable[[dict], None], with_runs: bool = False, actor: str = ""
) -> dict:
    """Write the tenant's document with `write` and fence its jobs at `cut`, in one transaction
    (a write that fails fences nothing). Returns the document. Its runs are a RunRows, read
    into a spool before the jobs are locked and copied from it while `write` goes through
    them (dump() does), so `write` must write them before it returns."""
    if cut.tzinfo is None:
        raise InvalidInput("cut", "must give its UTC offset (e.g. 2030-01-01T09:00:00Z)")
    with transaction.atomic():
        Tenant.objects.select_for_update().get(id=tenant.id)
        earlier = AuditEvent.objects.filter(tenant=tenant, action=EXPORTED).order_by("-id").first()
        if earlier is not None:
            raise InvalidInput(
                "tenant",
                f"tenant {tenant.slug!r} was exported already, for the cut "
                f"{earlier.detail.get('cut')} (audit event {earlier.id}): import that "
                "document in the new cell",
            )
        now = db_now()
        if cut <= now:
            raise InvalidInput(
                "cut",
                f"must be after this cell's now ({now.isoformat()}): fires up to now may be recorded here already",
            )
        # The history first, while the beats go on claiming the jobs: the locks below last as
        # long as the fence and the copy of the spool into the document, not this read.
        runs = RunRows(finished_runs(tenant, cut) if with_runs else None)
        runs.read()
        jobs = list(
            Job.objects.select_for_update(no_key=True, of=("self",))
            .filter(tenant=tenant)
            .select_related("calendar", "after_job")
            .order_by("id")
        )
        document = export_document(tenant, jobs, cut, runs)
        for job in jobs:
            job.end_at, job.next_run_at = fenced(job, cut)
        save_fences(jobs)
        # Its keys, and any change to its jobs, are the new cell's from now on: here the jobs fire
        # out their fires before the cut, and nothing can unfence them (services refuse an
        # inactive tenant's job writes).
        Tenant.objects.filter(id=tenant.id).update(is_active=False)
        write(document)
        AuditEvent.objects.create(
            tenant=tenant,
            action=EXPORTED,
            actor=actor,
            detail={
                "cut": cut.isoformat(),
                "jobs": len(jobs),
                "runs": document["runs"].written,
                # The bounds the fence replaced, so that no end_at is lost with the document.
                "end_at_before": {row["name"]: row["end_at"].isoformat() for row in document["jobs"] if row["end_at"]},
            },
        )
        if db_now() >= cut:
            raise InvalidInput("cut", "passed while the export ran: nothing was fenced; choose a later cut")
    wake_beats()
    return document


# One statement for all the tenant's jobs: Django's bulk_update builds a CASE per column and
# row, which spent most of a 10,000-job export (and held the jobs' locks that long).
FENCE_JOBS_PG = f"""
UPDATE {Job._meta.db_table} AS job
   SET end_at = fence.end_at, next_run_at = fence.next_run_at, version = job.version + 1
  FROM unnest(%s::bigint[], %s::timestamptz[], %s::timestamptz[]) AS fence(id, end_at, next_run_at)
 WHERE job.id = fence.id"""


def save_fences(jobs: list[Job]) -> None:
    """Save each job's fenced end_at and next_run_at, and a new version."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                FENCE_JOBS_PG,
                [
                    pgarrays.integers(job.id for job in jobs),
                    pgarrays.times(job.end_at for job in jobs),
                    pgarrays.times(job.next_run_at for job in jobs),
                ],
            )
        return
    for job in jobs:
        job.version += 1
    Job.objects.bulk_update(jobs, ["end_at", "next_run_at", "version"], batch_size=500)


def finished_runs(tenant: Tenant, cut: datetime) -> models.QuerySet:
    """The runs a document carries with `--with-runs`: the finished ones before the cut (open
    runs finish in the old cell)."""
    return JobRun.objects.filter(tenant=tenant, state__in=TERMINAL_STATES, scheduled_at__lt=cut).order_by(
        "scheduled_at", "id"
    )


def export_document(tenant: Tenant, jobs: list[Job], cut: datetime, runs: RunRows) -> dict:
    runs.names = {job.id: job.name for job in jobs}
    monitors = {monitor.job_id: monitor for monitor in Monitor.objects.filter(job__tenant=tenant)}
    rules = {rule.job_id: row_of(rule) for rule in AlertRule.objects.filter(job__tenant=tenant)}
    job_rows = []
    for job in jobs:
        row = {
            **row_of(job),
            "calendar": job.calendar.name if job.calendar_id else "",
            "after_job": job.after_job.name if job.after_job_id else "",
        }
        if job.id in monitors:
            row["ping_key"], row["ping_cell"] = str(monitors[job.id].ping_key), monitors[job.id].cell
        if job.id in rules:
            row["alert_rule"] = rules[job.id]
        job_rows.append(row)
    return {
        "format": FORMAT,
        "cut": cut.isoformat(),
        "exported_at": db_now().isoformat(),
        "tenant": row_of(tenant),
        **{
            key: crypto.decrypt(getattr(tenant, column)) if getattr(tenant, column) else ""
            for column, key in SECRETS.items()
        },
        "calendars": [row_of(calendar) for calendar in Calendar.objects.filter(tenant=tenant).order_by("id")],
        "windows": [row_of(window) for window in MaintenanceWindow.objects.filter(tenant=tenant).order_by("id")],
        "jobs": job_rows,
        "warnings": [
            f"job {job.name!r}: its calendar ({job.calendar.name}, {job.calendar_policy}) moves fires over "
            "non-business days next to the cut, so a fire moved onto one instant from both sides runs in "
            "both cells; a cut on a business day between two business days avoids it"
            for job in jobs
            if straddles(job, cut)
        ],
        "api_keys": [row_of(key) for key in ApiKey.objects.filter(tenant=tenant).order_by("id")],
        "runs": runs,
    }


# --- import --------------------------------------------------------------------------------


def tenant_import(document, *, late: bool = False, actor: str = "") -> Tenant:
    """Create the tenant of an exported document in this cell, its jobs starting at the cut."""
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise InvalidInput("format", f"not a tenant document ({FORMAT!r} expected)")
    cut = parse_datetime(str(document.get("cut", "")))
    if cut is None or cut.tzinfo is None:
        raise InvalidInput("cut", "must be an instant with its UTC offset")
    # Every object as the API would take it, before anything is written (services/tenantcheck.py).
    tenant_row = check_document(document, db_now())
    try:
        with transaction.atomic():
            now = db_now()
            if cut <= now and not late:
                raise InvalidInput(
                    "cut",
                    f"has passed in this cell ({now.isoformat()}): its fires from the cut until "
                    "now would be missed; import with --late to fire them by each job's misfire "
                    "policy, as after an outage",
                )
            tenant = create_tenant(tenant_row, document)
            calendars = {
                calendar.name: calendar
                for calendar in Calendar.objects.bulk_create(
                    Calendar(tenant=tenant, **columns_of(Calendar, row, f"calendars[{i}]"))
                    for i, row in enumerate(rows(document, "calendars"))
                )
            }
            MaintenanceWindow.objects.bulk_create(
                MaintenanceWindow(tenant=tenant, **columns_of(MaintenanceWindow, row, f"windows[{i}]"))
                for i, row in enumerate(rows(document, "windows"))
            )
            jobs = create_jobs(tenant, rows(document, "jobs"), calendars, cut)
            # Again under the queues' locks: another tenant may have claimed one since the check.
            for queue in sorted({job.queue for job in jobs.values()}):
                check_queue_tenant(tenant, queue)
            ApiKey.objects.bulk_create(
                ApiKey(tenant=tenant, **columns_of(ApiKey, row, f"api_keys[{i}]"))
                for i, row in enumerate(rows(document, "api_keys"))
            )
            copied = create_runs(tenant, run_rows(document), jobs)
            AuditEvent.objects.create(
                tenant=tenant,
                action=IMPORTED,
                actor=actor,
                detail={"cut": cut.isoformat(), "jobs": len(jobs), "runs": copied, "late": cut <= now},
            )
            wake_beats()
    except IntegrityError as exc:
        raise InvalidInput("tenant", f"this cell already holds part of it: {str(exc).splitlines()[0]}") from None
    return tenant


def create_tenant(row: dict, document: dict) -> Tenant:
    if Tenant.objects.filter(slug=row.get("slug")).exists():
        raise InvalidInput("tenant.slug", f"tenant {row.get('slug')!r} already exists in this cell")
    secrets = {column: crypto.encrypt(document[key]) if document.get(key) else "" for column, key in SECRETS.items()}
    return Tenant.objects.create(**row, **secrets)


def create_jobs(tenant: Tenant, job_rows: list, calendars: dict[str, Calendar], cut: datetime) -> dict[str, Job]:
    jobs, extras = [], []
    for i, raw in enumerate(job_rows):
        where = f"jobs[{i}]"
        raw = dict(raw) if isinstance(raw, dict) else raw
        if not isinstance(raw, dict):
            raise InvalidInput(where, "must be an object")
        calendar, parent = raw.pop("calendar", ""), raw.pop("after_job", "")
        ping_key, ping_cell, rule = raw.pop("ping_key", None), raw.pop("ping_cell", ""), raw.pop("alert_rule", None)
        if calendar and calendar not in calendars:
            raise InvalidInput(f"{where}.calendar", f"no calendar {calendar!r} in the document")
        job = Job(tenant=tenant, calendar=calendars.get(calendar), **columns_of(Job, raw, where))
        started_at_cut(job, cut, chained=bool(parent))
        jobs.append(job)
        extras.append((parent, (ping_key, ping_cell), rule, where))
    Job.objects.bulk_create(jobs, batch_size=1000)
    by_name = {job.name: job for job in jobs}
    chained = []
    for job, (parent, _, _, where) in zip(jobs, extras, strict=True):
        if parent:
            if parent not in by_name:
                raise InvalidInput(f"{where}.after_job", f"job {job.name!r} follows {parent!r}, not in the document")
            job.after_job = by_name[parent]
            chained.append(job)
    Job.objects.bulk_update(chained, ["after_job"], batch_size=1000)
    monitors, rules = [], []
    for job, (_, (ping_key, ping_cell), rule, where) in zip(jobs, extras, strict=True):
        if ping_key:
            # The URL's cell stays what the pinging machines were given (the proxy routes it here).
            monitors.append(Monitor(job=job, tenant=tenant, ping_key=ping_key, cell=ping_cell))
        if rule is not None:
            values = columns_of(AlertRule, rule, f"{where}.alert_rule")
            # Evaluated here from the cut on: the runs before it stay (and were judged) in the old cell.
            values["checked_until"] = max(values.get("checked_until") or cut, cut)
            values["next_check_at"] = max(values.get("next_check_at") or cut, cut)
            rules.append(AlertRule(job=job, **values))
    Monitor.objects.bulk_create(monitors)
    AlertRule.objects.bulk_create(rules)
    return by_name


def create_runs(tenant: Tenant, runs: Iterable, jobs: dict[str, Job]) -> int:
    """Bring the finished runs the export carried (history only: none of them runs again)."""
    batch, copied = [], 0
    for i, raw in enumerate(runs):
        raw = dict(raw) if isinstance(raw, dict) else raw
        if not isinstance(raw, dict) or raw.get("job") not in jobs:
            raise InvalidInput(f"runs[{i}].job", "must name a job of the document")
        job = jobs[raw.pop("job")]
        run = JobRun(tenant=tenant, job=job, **columns_of(JobRun, raw, f"runs[{i}]"))
        if run.state not in TERMINAL_STATES:
            raise InvalidInput(f"runs[{i}].state", "must be a finished state: open runs stay in the old cell")
        batch.append(run)
        if len(batch) >= RUNS_BATCH:
            copied += len(JobRun.objects.bulk_create(batch))
            batch = []
    return copied + len(JobRun.objects.bulk_create(batch))
