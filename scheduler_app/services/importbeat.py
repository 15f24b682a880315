"""Import schedules from django-celery-beat: PeriodicTask rows and beat schedule entries (the
settings CELERY_BEAT_SCHEDULE and its old name CELERYBEAT_SCHEDULE, and the Celery app's
conf.beat_schedule, which a celery.py may set itself).

Each source becomes one job of a tenant, created through services (job_create, job_pause)
and named exactly as its source (PeriodicTask.name is unique and at most 200 characters, as
a job's name is, so the mapping is one to one). translate_*() say what job a source means,
or why it cannot be one; import_schedules() compares with the jobs that exist and writes,
in one transaction. A second import of the same sources changes nothing: a job that already
has the source's meaning is "unchanged", and one that differs is never overwritten.

What a source means is Celery's reading of it: a crontab's fields are expanded by Celery's
own parser (names, ranges, steps) and written back as a cron expression; where Celery's
rules and cron's differ (a day must match both day-of-month and day-of-week in Celery,
either in cron) the expression is chosen so that cron's reading is the same, or the source
is refused with the reason.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from celery import current_app
from celery import schedules as celery_schedules
from django.conf import settings
from django.db import transaction
from django_celery_beat.clockedschedule import clocked
from django_celery_beat.models import PeriodicTask, PeriodicTasks
from django_celery_beat.tzcrontab import TzAwareCrontab

from scheduler_app import schedules, services
from scheduler_app.conf import app_settings
from scheduler_app.models import Job, Tenant, db_now
from scheduler_app.services.beatfields import (
    Untranslatable,
    broker_priority,
    crontab_schedule,
    interval_seconds,
    project_zone,
)
from scheduler_app.targets import task as task_target

TAG = "celery-beat"
# The fields an import sets from its source: the ones compared when the job exists already.
SOURCE_FIELDS = (
    "name",
    "target_kind",
    "task_name",
    "args",
    "kwargs",
    "queue",
    "priority",
    "cron",
    "timezone",
    "every",
    "at",
    "start_at",
    "end_at",
)
ONE_MICROSECOND = timedelta(microseconds=1)
# Where a beat schedule may be written, in the order they are read: the settings under their
# current and their old (Celery 3) name, then the Celery app's own configuration.
SCHEDULE_SOURCES = ("CELERY_BEAT_SCHEDULE", "CELERYBEAT_SCHEDULE", "app.conf.beat_schedule")


@dataclass
class Translation:
    """The job a source means (spec), or `refusal`; `notes` say how its meaning differs."""

    spec: services.JobSpec | None = None
    paused: bool = False
    # Why no job is made; with a `spec`, the schedule was translated all the same (shown in
    # the report), and with `lapsed` a job already made from the source is still compared.
    refusal: str = ""
    lapsed: bool = False
    missing_task: str = ""  # a task CRONFLEET_ALLOWED_TASKS does not allow
    notes: list[str] = field(default_factory=list)
    # A one-off taken from a repeating schedule (or a passed clocked time): its instant was
    # decided at the first import and is not compared again.
    decided_at: bool = False


@dataclass
class Outcome:
    origin: str  # "PeriodicTask 12", "CELERY_BEAT_SCHEDULE", "CELERYBEAT_SCHEDULE" or "app.conf.beat_schedule"
    name: str
    result: str  # imported, would import, unchanged, skipped
    schedule: str = ""
    notes: list[str] = field(default_factory=list)
    row_id: int | None = None  # the PeriodicTask an imported or unchanged job stands for
    queue: str = ""  # the job's queue ('' is the default one), when it has a job or would have
    missing_task: str = ""  # skipped because CRONFLEET_ALLOWED_TASKS does not allow this task


@dataclass
class Report:
    outcomes: list[Outcome]
    differences: list[str]
    disabled: list[str]  # names of the PeriodicTask rows disabled (or, in a dry run, that would be)
    still_enabled: list[str]  # rows of imported jobs left enabled: both schedulers would send them
    dry_run: bool
    read: list[str] = field(default_factory=list)  # the sources read, for "(nothing to import)"

    def count(self, result: str) -> int:
        return sum(outcome.result == result for outcome in self.outcomes)

    def missing_tasks(self) -> list[str]:
        """The tasks of skipped sources that CRONFLEET_ALLOWED_TASKS lacks, in order."""
        return list(dict.fromkeys(outcome.missing_task for outcome in self.outcomes if outcome.missing_task))

    def allow_setting(self) -> str:
        """The CRONFLEET_ALLOWED_TASKS line of a Django settings module that allows the tasks of
        the skipped sources too (its entries as they are, patterns included); empty when none
        is missing."""
        missing = self.missing_tasks()
        if not missing:
            return ""
        return f"CRONFLEET_ALLOWED_TASKS = {[*app_settings.ALLOWED_TASKS, *missing]!r}"

    def allow_line(self) -> str:
        """allow_setting() as Cronfleet's own deployment takes it: its environment variable,
        comma separated; empty when none is missing."""
        missing = self.missing_tasks()
        if not missing:
            return ""
        return "CRONFLEET_ALLOWED_TASKS=" + ",".join([*app_settings.ALLOWED_TASKS, *missing])

    def queues(self) -> dict[str, int]:
        """The jobs imported, unchanged or that a dry run would import, by queue ('' default)."""
        found: dict[str, int] = {}
        for outcome in self.outcomes:
            if outcome.result in ("imported", "would import", "unchanged"):
                found[outcome.queue] = found.get(outcome.queue, 0) + 1
        return dict(sorted(found.items()))


# --- what a source means -----------------------------------------------------------------


def base_spec(name: str, task: str, args, kwargs, description: str) -> services.JobSpec:
    """The parts of a job every source has; refuses what no job can be."""
    try:
        name = services.check_name("name", name)
    except services.InvalidInput as exc:
        raise Untranslatable(f"the name {exc.message}") from None
    if not isinstance(task, str) or not task:
        raise Untranslatable("task: must be a task name")
    if not isinstance(args, (list, tuple)) or not isinstance(kwargs, dict):
        raise Untranslatable("args must be a list and kwargs an object")
    return services.JobSpec(
        name=name,
        task_name=task,
        args=list(args),
        kwargs=dict(kwargs),
        tags=[TAG],
        description=description,
        max_attempts=1,
        timeout_seconds=app_settings.MAX_JOB_TIMEOUT_SECONDS,
    )


def check_task(result: Translation) -> Translation:
    """Refuse a translated source whose task the workers may not run, keeping its schedule."""
    assert result.spec is not None  # both callers set it just before
    task = result.spec.task_name
    if not task_target.task_allowed(task):
        result.refusal = f"task {task!r} is not in CRONFLEET_ALLOWED_TASKS"
        result.missing_task, result.lapsed = task, False
    return result


def translate_row(row: PeriodicTask, now: datetime) -> Translation:
    """The job a PeriodicTask row means (rows come with their schedule rows joined)."""
    result = Translation()
    try:
        args, kwargs = json.loads(row.args or "[]"), json.loads(row.kwargs or "{}")
    except ValueError as exc:
        return Translation(refusal=f"args or kwargs are not JSON ({exc}); django-celery-beat disables such a row")
    try:
        spec = base_spec(
            row.name,
            row.task,
            args,
            kwargs,
            description=(
                f"Imported from django-celery-beat PeriodicTask {row.id}."
                + (f"\n\n{row.description}" if row.description else "")
            ),
        )
        spec.queue = row.queue or ""
        spec.priority = broker_priority(row.priority, result.notes)
        row_schedule(row, spec, result, now)
    except Untranslatable as exc:
        return Translation(refusal=str(exc))
    ignored = [option for option in ("exchange", "routing_key") if getattr(row, option)]
    if row.headers and row.headers.strip() not in ("{}", ""):
        ignored.append("headers")
    if ignored:
        result.notes.append(f"{', '.join(ignored)} not carried over (jobs are routed by queue)")
    if row.expire_seconds:
        result.notes.append(f"expire_seconds {row.expire_seconds} (each message's lifetime) has no equivalent")
    result.paused = not row.enabled
    result.spec = spec
    return check_task(result)


def row_schedule(row: PeriodicTask, spec: services.JobSpec, result: Translation, now: datetime) -> None:
    """Set the schedule of `spec` from the row's crontab, interval or clocked time, within
    start_time (start_at) and expires (end_at)."""
    notes = result.notes
    if row.start_time is not None:
        spec.start_at = row.start_time
    if row.expires is not None:
        if row.expires <= now:
            raise Untranslatable(f"expired at {row.expires.isoformat()}: django-celery-beat no longer runs it")
        # expires is exclusive (Celery stops at now >= expires), end_at inclusive.
        spec.end_at = row.expires - ONE_MICROSECOND
        result.notes.append(
            f"expires {row.expires.isoformat()} becomes end_at 1 µs earlier (expires excludes its "
            "instant, end_at includes it)"
        )
    if row.solar_id is not None:
        solar = row.solar
        raise Untranslatable(
            f"solar schedule ({solar.event} at {solar.latitude}, {solar.longitude}): the event's time of day "
            "changes every day (even solar noon drifts by about 16 minutes over a year), so no cron expression "
            "follows it; add a cron job at a fixed local time instead"
        )
    if row.crontab_id is not None:
        spec.timezone = row_zone(row, notes)
        try:
            crontab = row.crontab.schedule  # Celery's parser, as the beat would run it
        except ValueError as exc:
            raise Untranslatable(f"crontab {row.crontab}: {exc} (django-celery-beat cannot run it either)") from None
        spec.cron = crontab_schedule(crontab, spec.timezone)
    elif row.interval_id is not None:
        interval = row.interval
        spec.every = interval_seconds(timedelta(**{interval.period: interval.every}))
        spec.timezone = ""
        if spec.start_at is not None:
            interval_start(row, spec, notes, now)
    elif row.clocked_id is not None:
        spec.at = row.clocked.clocked_time
        if spec.at < now - services.PAST_GRACE:
            if not row.enabled or row.total_run_count:
                # Refused unless a job was made from it already (an import before its time, or
                # one that disabled the row): that job is still what the row means.
                result.refusal = f"a one-off whose time ({spec.at.isoformat()}) has passed: nothing left to run"
                result.lapsed = result.decided_at = True
                return
            notes.append(
                f"clocked time {spec.at.isoformat()} has passed and it never ran: django-celery-beat "
                "would send it at its next tick; imported to fire at once"
            )
            spec.at, result.decided_at = now, True
        if spec.end_at is not None and spec.at > spec.end_at:
            raise Untranslatable(f"clocked time {spec.at.isoformat()} is after expires: it never runs")
        return
    else:
        raise Untranslatable("the row has no schedule (crontab, interval, solar or clocked)")
    if row.one_off:
        make_one_off(spec, result, now, last_change=row.date_changed)


def interval_start(row: PeriodicTask, spec: services.JobSpec, notes: list[str], now: datetime) -> None:
    """django-celery-beat fires an interval row first at its start_time (a row that never ran
    counts its last run 30 years back), then every interval; a job's interval fires at whole
    seconds from start_at, so a start_time with a fraction of a second starts at the next one
    (else the first fire would be one interval later)."""
    assert spec.start_at is not None  # the one caller checked
    if spec.start_at.microsecond:
        spec.start_at = spec.start_at.replace(microsecond=0) + timedelta(seconds=1)
        notes.append(
            f"start_time {row.start_time.isoformat()} becomes start_at {spec.start_at.isoformat()} (whole "
            "seconds): the first fire"
        )
    if spec.start_at < now and row.last_run_at is None and row.enabled:
        notes.append(
            f"start_time {spec.start_at.isoformat()} has passed and it never ran: django-celery-beat would "
            "send it at once, then every interval from then; the job fires at start_time + k x interval"
        )


def row_zone(row: PeriodicTask, notes: list[str]) -> str:
    """The zone django-celery-beat reads the row's crontab in, made explicit."""
    zone = row.crontab.timezone
    if getattr(settings, "DJANGO_CELERY_BEAT_TZ_AWARE", True) and zone and str(zone):
        return str(zone)
    name, decided_by = project_zone()
    why = "DJANGO_CELERY_BEAT_TZ_AWARE is off" if zone else "the crontab has no zone"
    notes.append(
        f"{why}: django-celery-beat reads it in the project's zone, {name} ({decided_by}); the job says {name}"
    )
    return name


def make_one_off(spec: services.JobSpec, result: Translation, now: datetime, *, last_change: datetime | None) -> None:
    """A one_off row with a repeating schedule fires once, at that schedule's next fire."""
    if spec.cron:
        schedule = schedules.Schedule(cron=spec.cron, timezone=spec.timezone, start_at=spec.start_at)
        at = schedules.next_fire_after(schedule, now)
    elif spec.start_at is not None:  # django-celery-beat fires an interval first at start_time
        at = max(spec.start_at, now)
    else:  # else one interval after the row's last change (at once if that has passed)
        at = max((last_change or now) + timedelta(seconds=spec.every or 0), now)
    if at is None or (spec.end_at is not None and at > spec.end_at):
        raise Untranslatable("a one-off whose schedule has no fire left")
    result.notes.append(f"one_off: imported as a one-off at {at.isoformat()}, the schedule's next fire")
    spec.cron, spec.every, spec.at, spec.timezone, spec.start_at = "", None, at, "", None
    result.decided_at = True


def translate_entry(name: str, entry: dict, now: datetime, origin: str = "CELERY_BEAT_SCHEDULE") -> Translation:
    """The job a beat schedule entry means (`origin`: where it is written)."""
    result = Translation()
    if not isinstance(entry, dict):
        return Translation(refusal=f"the entry is a {type(entry).__name__}, not a dict with task and schedule")
    options = entry.get("options") or {}
    if not isinstance(options, dict):
        return Translation(refusal="options: must be a dict")
    options = dict(options)
    try:
        spec = base_spec(
            name,
            entry.get("task", ""),
            entry.get("args") or [],
            entry.get("kwargs") or {},
            description=f"Imported from {origin}.",
        )
        spec.queue = options.pop("queue", None) or ""
        spec.priority = broker_priority(options.pop("priority", None), result.notes)
        entry_schedule(entry.get("schedule"), spec, result.notes)
    except Untranslatable as exc:
        return Translation(refusal=str(exc))
    if entry.get("relative"):
        result.notes.append("relative=True (Celery rounds the first fire to the interval) is not carried over")
    if options:
        result.notes.append(f"options {', '.join(sorted(options))} not carried over")
    result.spec = spec
    return check_task(result)


def entry_schedule(value, spec: services.JobSpec, notes: list[str]) -> None:
    if isinstance(value, (int, float, timedelta)) and not isinstance(value, bool):
        value = celery_schedules.maybe_schedule(value)
    if isinstance(value, TzAwareCrontab):
        spec.timezone = str(value.tz)
        spec.cron = crontab_schedule(value, spec.timezone)
    elif isinstance(value, celery_schedules.crontab):
        spec.timezone, decided_by = project_zone()
        notes.append(
            f"a crontab in settings has no zone: Celery reads it in {spec.timezone} ({decided_by}); "
            f"the job says {spec.timezone}"
        )
        spec.cron = crontab_schedule(value, spec.timezone)
    elif isinstance(value, celery_schedules.schedule):
        spec.every = interval_seconds(value.run_every)
    elif isinstance(value, clocked):
        spec.at = value.clocked_time
    elif isinstance(value, celery_schedules.solar):
        raise Untranslatable(
            f"solar schedule ({value.event}): its time of day changes every day; no cron expression follows it"
        )
    else:
        raise Untranslatable(f"schedule {value!r} is not a crontab, an interval or a number of seconds")


# --- the import ----------------------------------------------------------------------------


def import_schedules(
    tenant: Tenant,
    *,
    from_db: bool,
    from_settings: bool,
    dry_run: bool,
    disable_source: bool,
    actor: str = "import_beat",
) -> Report:
    """Import the sources into `tenant`'s jobs; with `dry_run`, only say what would happen.

    Everything is written in one transaction, with the PeriodicTask rows of imported (and
    unchanged) jobs disabled in it when `disable_source`, so that at no commit do both
    schedulers hold the task enabled.
    """
    now = db_now()
    sources = read_sources(from_db=from_db, from_settings=from_settings, now=now)
    with transaction.atomic():
        if not dry_run:  # the dedicated queues all at once, in order (jobspec.lock_queues)
            services.lock_queues(translation.spec.queue for _, translation in sources if translation.spec)
        planned = 0
        for outcome, translation in sources:
            planned += apply(tenant, outcome, translation, now, dry_run=dry_run, planned=planned, actor=actor)
        rows = [
            outcome
            for outcome, _ in sources
            if outcome.result in ("imported", "would import", "unchanged") and outcome.row_id is not None
        ]
        disabled = disable_rows(rows, dry_run=dry_run) if disable_source else []
        still_enabled = (
            []
            if disable_source
            else list(
                PeriodicTask.objects.filter(id__in=[outcome.row_id for outcome in rows], enabled=True)
                .order_by("id")
                .values_list("name", flat=True)
            )
        )
    read = (["PeriodicTask rows"] if from_db else []) + (list(SCHEDULE_SOURCES) if from_settings else [])
    return Report(
        outcomes=[outcome for outcome, _ in sources],
        differences=differences(sources),
        disabled=disabled,
        still_enabled=still_enabled,
        dry_run=dry_run,
        read=read,
    )


def read_sources(*, from_db: bool, from_settings: bool, now: datetime) -> list[tuple[Outcome, Translation]]:
    """Every source read, with the job it means (or why none)."""
    sources: list[tuple[Outcome, Translation]] = []
    row_names: set[str] = set()
    if from_db:
        for row in PeriodicTask.objects.select_related("crontab", "interval", "solar", "clocked").order_by("id"):
            row_names.add(row.name)
            sources.append((Outcome(f"PeriodicTask {row.id}", row.name, "", row_id=row.id), translate_row(row, now)))
    if from_settings:
        sources += settings_sources(row_names, now)
    return sources


def beat_schedules() -> list[tuple[str, object]]:
    """(origin, schedule) for each place of SCHEDULE_SOURCES. The Celery app reads
    CELERY_BEAT_SCHEDULE as its beat_schedule, so both usually hold the same entries."""
    return [
        ("CELERY_BEAT_SCHEDULE", getattr(settings, "CELERY_BEAT_SCHEDULE", None)),
        ("CELERYBEAT_SCHEDULE", getattr(settings, "CELERYBEAT_SCHEDULE", None)),
        ("app.conf.beat_schedule", current_app.conf.beat_schedule),
    ]


def settings_sources(row_names: set[str], now: datetime) -> list[tuple[Outcome, Translation]]:
    """The entries of every beat schedule, each name once: an entry read again from a later
    place (the same entry) is left out, a different one of the same name is skipped."""
    sources: list[tuple[Outcome, Translation]] = []
    seen: dict[str, tuple[str, object]] = {}
    earlier: list[object] = []
    for origin, entries in beat_schedules():
        if not entries or any(entries == schedule for schedule in earlier):
            continue  # empty, or the app's reading of a setting read already
        earlier.append(entries)
        if not isinstance(entries, dict):
            refusal = f"{origin}: must be a dict of entries, not a {type(entries).__name__}"
            sources.append((Outcome(origin, "-", ""), Translation(refusal=refusal)))
            continue
        for name, entry in entries.items():
            outcome = Outcome(origin, str(name), "")
            if name in seen:
                first, first_entry = seen[name]
                if first_entry == entry:
                    continue
                refusal = f"also in {first}, with a different entry: imported from {first}"
                sources.append((outcome, Translation(refusal=refusal)))
                continue
            seen[name] = (origin, entry)
            if name in row_names:
                refusal = (
                    "also a PeriodicTask of that name (django-celery-beat copies the beat schedule into "
                    "rows at start-up): imported from the row"
                )
                sources.append((outcome, Translation(refusal=refusal)))
            else:
                sources.append((outcome, translate_entry(str(name), entry, now, origin)))
    return sources


def apply(
    tenant: Tenant,
    outcome: Outcome,
    translation: Translation,
    now: datetime,
    *,
    dry_run: bool,
    planned: int,
    actor: str,
) -> int:
    """Fill in `outcome` for one source, creating its job unless `dry_run`; return 1 when a
    job was (or would be) created."""
    outcome.notes = translation.notes
    spec = translation.spec
    if spec is None:
        outcome.result, outcome.notes = "skipped", [translation.refusal]
        return 0
    outcome.schedule, outcome.queue = schedule_text(spec), spec.queue
    existing = Job.objects.filter(tenant=tenant, name=spec.name).first()
    if translation.refusal and not (translation.lapsed and existing is not None):
        outcome.result, outcome.notes = "skipped", [translation.refusal, *translation.notes]
        outcome.missing_task = translation.missing_task
        return 0
    try:
        if existing is not None:
            compare(existing, spec, translation, now, outcome)
            return 0
        services.validate_spec(tenant, spec, now)
        if (
            dry_run
            and tenant.max_jobs is not None
            and (Job.objects.filter(tenant=tenant).count() + planned >= tenant.max_jobs)
        ):
            raise services.QuotaExceeded(
                "name", f"tenant {tenant.slug!r} has reached its quota of {tenant.max_jobs} jobs (max_jobs)"
            )
        if not dry_run:  # job_create checks max_jobs itself, under the tenant's row lock
            with transaction.atomic():
                job = services.job_create(tenant, spec, actor=actor)
                if translation.paused:
                    services.job_pause(job, note="disabled in django-celery-beat when imported", actor=actor)
    except services.InvalidInput as exc:
        outcome.result, outcome.notes = "skipped", [f"{exc.field}: {exc.message}"]
        return 0
    outcome.result = "would import" if dry_run else "imported"
    if translation.paused:
        outcome.notes = [*outcome.notes, "disabled in django-celery-beat: imported paused"]
    return 1


def compare(job: Job, spec: services.JobSpec, translation: Translation, now: datetime, outcome: Outcome) -> None:
    """Unchanged when the job already means what the source does; else skipped, never overwritten."""
    changes = {key: getattr(spec, key) for key in SOURCE_FIELDS}
    if not spec.cron:
        del changes["timezone"]  # an interval or a one-off has no zone of its own
    if translation.decided_at and job.run_at is not None:
        changes["at"] = job.run_at
        outcome.schedule = f"once at {job.run_at.astimezone(UTC):%Y-%m-%d %H:%M:%S}Z"  # the instant decided then
    edit = services.plan_edit(job, changes, now)
    if edit.diff:
        outcome.result = "skipped"
        outcome.notes = [
            f"a job named {job.name!r} exists and differs ({', '.join(sorted(edit.diff))}); "
            "not overwritten: change it with jobs edit, or delete it and import again"
        ]
    else:
        outcome.result = "unchanged"


def disable_rows(outcomes: list[Outcome], *, dry_run: bool) -> list[str]:
    """Disable the PeriodicTask rows still enabled among `outcomes`; return their names."""
    ids = [outcome.row_id for outcome in outcomes]
    names = list(PeriodicTask.objects.filter(id__in=ids, enabled=True).order_by("id").values_list("name", flat=True))
    if names and not dry_run:
        PeriodicTask.objects.filter(id__in=ids, enabled=True).update(enabled=False)
        # A running DatabaseScheduler rereads its rows when this timestamp moves (an update()
        # sends no signal, so it is moved here, in the same transaction).
        PeriodicTasks.update_changed()
    for outcome in outcomes:
        if outcome.name in names:
            outcome.notes = [*outcome.notes, "source row would be disabled" if dry_run else "source row disabled"]
    return names


def schedule_text(spec: services.JobSpec) -> str:
    if spec.cron:
        return f"cron {spec.cron} ({spec.timezone})"
    if spec.every is not None:
        return f"every {spec.every}s"
    return f"once at {spec.at.astimezone(UTC):%Y-%m-%d %H:%M:%S}Z" if spec.at else "-"


def differences(sources: list[tuple[Outcome, Translation]]) -> list[str]:
    """What differs in meaning for every job imported, said once under the report."""
    specs = [translation.spec for _, translation in sources if translation.spec is not None and not translation.refusal]
    if not specs:
        return []
    found = [
        "last_run_at and total_run_count are not carried over: each job starts with an empty ledger and fires "
        "first at its next fire time after the import",
        f"each job makes one attempt per fire (max_attempts 1) as Celery beat sends one message; its timeout is "
        f"the longest allowed ({app_settings.MAX_JOB_TIMEOUT_SECONDS} s, where Celery had no limit unless "
        "the task set one); raise or lower both with jobs edit",
        "enabled is carried when a job is created; after that, pause and resume the job in Cronfleet",
    ]
    if any(spec.cron for spec in specs):
        found.append(
            "crontabs are read in the job's explicit zone with Debian cron's DST rules (a time skipped "
            "in spring fires right after the gap, a repeated autumn hour fires once); Celery's crontab "
            "differs around DST changes"
        )
    if any(spec.every is not None for spec in specs):
        found.append(
            "intervals are anchored: fires at import + k x interval (with a start_time in the future: at "
            "start_time, then every interval, as django-celery-beat), never drifting; "
            "django-celery-beat counts each interval from the last run, so its fires drift later"
        )
    return found
