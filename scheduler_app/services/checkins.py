"""Check-ins: what a ping does to a monitored job's runs, and a monitored job's ping key.

A ping names its job by the key alone (Monitor.ping_key, random and unique): it touches that
job's runs and nobody else's. It closes the job's current open run (the latest fire not yet
closed: `pending` waiting for a ping, or `running` after /start), by compare-and-set on the
run's state: two pings at once never close one run twice; the one that loses finds the run
closed and goes on as if it had come later. A ping with no open run records a run of its
own at the ping's time (a job that ran off its schedule, or pinged after its fire was
already missed), up to CRONFLEET_PING_OWN_RUNS_PER_HOUR of them in any hour: past that the
ping records nothing (whoever holds a check-in URL cannot grow the ledger without bound), and
the job's fires are still closed by the pings that find them open.

- success: the run `succeeded`; its duration is from its /start if it had one, else zero;
- start: the run `running` from now (a second /start starts the clock again);
- fail, or an exit status 1-255: the run `failed`, the status in its reason; 0 is success.

The body (up to BODY_LIMIT bytes, longer is cut and the run's reason says so) is the run's
result. Pings are not operator actions: they write no audit rows (the run row is the record).

A key has one spelling: the lowercase hyphenated 36 characters of str(uuid.UUID(...)), the
form ping URLs are made with. uuid.UUID() also reads upper case, braces, `urn:uuid:` and
hyphens anywhere; those spellings are unknown keys here, so that one key is one key to every
counter in front of the lookup.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import IntegrityError, connection, models, transaction
from django.db.models.expressions import RawSQL
from django.db.models.functions import Coalesce
from django.urls import reverse

from scheduler_app.conf import app_settings
from scheduler_app.ledger import autopause
from scheduler_app.models import (
    CHECKIN_PREFIX,
    STARTED_REASON,
    Job,
    JobRun,
    Monitor,
    RunState,
    TargetKind,
    Trigger,
    db_now,
)

BODY_LIMIT = 10_000  # bytes of a ping's body kept as its run's result
CUT_NOTE = f"checkin: body cut to its first {BODY_LIMIT} bytes"
OPEN_STATES = (RunState.PENDING, RunState.RUNNING)
SUCCESS, START, FAIL = "success", "start", "fail"
CAS_TRIES = 5  # open runs one ping may find closed under it before it records a run of its own
OWN_RUNS_WINDOW = timedelta(hours=1)  # CRONFLEET_PING_OWN_RUNS_PER_HOUR counts in this window
KEY_LENGTH = 36  # a ping key's one spelling: 8-4-4-4-12 lowercase hex digits


class UnknownKey(LookupError):
    """No monitored job has this ping key."""


@dataclass(frozen=True)
class Ping:
    run_id: int | None  # None: nothing recorded, the job's runs of its own are at their bound
    state: str
    recorded: bool  # True: no open run, the ping recorded one of its own
    duplicate: bool = False  # its own run's fire time was taken: run_id is the run found there

    @property
    def dropped(self) -> bool:
        return self.run_id is None


def ping_url(monitor: Monitor, base: str | None = None) -> str:
    """The check-in URL of a monitor: /ping/<key>, or /ping/<cell>/<key> when its key was made
    in a named cell; `base` is the site's address (default CRONFLEET_PING_BASE_URL). The path is
    reversed (scheduler_app/urls.py), so it has the prefix the project includes Cronfleet's URLs at."""
    key = str(monitor.ping_key)
    if monitor.cell:
        path = reverse("cronfleet:ping-cell", kwargs={"cell": monitor.cell, "key": key})
    else:
        path = reverse("cronfleet:ping", kwargs={"key": key})
    return f"{(base or app_settings.PING_BASE_URL).rstrip('/')}{path}"


def ensure_monitor(job: Job) -> Monitor | None:
    """The Monitor (ping key) of a monitored job, made when it has none; None for other kinds.
    Call in the transaction that writes the job."""
    if job.target_kind != TargetKind.MONITOR:
        return None
    monitor, _ = Monitor.objects.get_or_create(
        job=job, defaults={"tenant_id": job.tenant_id, "cell": app_settings.CELL}
    )
    return monitor


def canonical_key(key: str) -> str | None:
    """`key` when it is a ping key's one spelling (str(uuid.UUID(...)): lowercase, hyphenated,
    36 characters), else None. Pure: no database."""
    if len(key) != KEY_LENGTH:
        return None
    try:
        parsed = uuid.UUID(key)
    except ValueError:
        return None
    return key if str(parsed) == key else None


def monitored_job(key: str) -> Job:
    """The monitored job of ping key `key`; UnknownKey for a key not in its one spelling
    (canonical_key), an unknown key, a job that is no longer monitored or a tenant that is not
    active (moved to another cell, say): the same answer for each, a key gives nothing away."""
    if canonical_key(str(key)) is None:
        raise UnknownKey(key)
    job = Job.objects.filter(monitor__ping_key=key, target_kind=TargetKind.MONITOR, tenant__is_active=True).first()
    if job is None:
        raise UnknownKey(key)
    return job


def excerpt(body: bytes) -> tuple[str, bool]:
    """The body as text (undecodable bytes replaced), at most BODY_LIMIT bytes; and whether it was cut."""
    cut = len(body) > BODY_LIMIT
    return body[:BODY_LIMIT].decode("utf-8", errors="replace"), cut


def signal_of(action: str) -> tuple[str, int | None]:
    """(SUCCESS | START | FAIL, exit status or None) of a URL's last part ("" is success);
    ValueError for anything else."""
    if action in ("", SUCCESS):
        return SUCCESS, None
    if action in (START, FAIL):
        return action, None
    if action.isdigit() and len(action) <= 3 and 0 <= int(action) <= 255:
        status = int(action)
        return (SUCCESS, 0) if status == 0 else (FAIL, status)
    raise ValueError(action)


def record_ping(
    key: str, action: str = SUCCESS, body: bytes = b"", *, job: Job | None = None, now: datetime | None = None
) -> Ping:
    """Apply one ping of `key` (action: "", "start", "fail" or an exit status) to its job's runs.
    `job`: the key's job when the caller has looked it up (monitored_job); `now`: the time of a
    run of its own (default: the database's clock once the job's own runs are locked)."""
    signal, status = signal_of(action)
    job = job if job is not None else monitored_job(key)
    text, cut = excerpt(body)
    with transaction.atomic():
        for _ in range(CAS_TRIES):
            current = (
                JobRun.objects.filter(job_id=job.id, state__in=OPEN_STATES, reason__startswith=CHECKIN_PREFIX)
                .order_by("-scheduled_at")
                .values("id", "state")
                .first()
            )
            if current is None:
                break
            changes = _changes(signal, status, text, cut, statement_clock())
            if JobRun.objects.filter(id=current["id"], state=current["state"]).update(**changes):
                _count_end(job, changes["state"])
                return Ping(current["id"], changes["state"], False)
        return _record_own(job, signal, status, text, cut, now)


def statement_clock():
    """The database's clock as of the statement that writes it (PostgreSQL's
    statement_timestamp(), not the transaction's start). A run's end is stamped by the
    statement that ends it, as the worker's is: the alert rules read runs by their end time,
    and a stamp taken earlier could fall behind a check that ran before this commit."""
    if connection.vendor == "postgresql":
        return RawSQL("statement_timestamp()", [], output_field=models.DateTimeField())
    return db_now()


def _changes(signal: str, status: int | None, text: str, cut: bool, now: datetime) -> dict:
    """The columns a ping sets on an open run (the compare-and-set's new values)."""
    if signal == START:
        return {"state": RunState.RUNNING, "started_at": now, "reason": STARTED_REASON, "result": text}
    ended = {"started_at": Coalesce("started_at", now), "finished_at": now, "result": text}
    if signal == SUCCESS:
        return {"state": RunState.SUCCEEDED, "reason": CUT_NOTE if cut else "", "error": "", **ended}
    failure = f"checkin: failed with exit status {status}" if status is not None else "checkin: /fail"
    reason = f"{failure}; body cut to its first {BODY_LIMIT} bytes" if cut else failure
    return {"state": RunState.FAILED, "reason": reason, "error": failure, **ended}


def _record_own(job: Job, signal: str, status: int | None, text: str, cut: bool, now: datetime | None) -> Ping:
    """A run at the ping's time for a ping that found no open run; nothing when the job has
    recorded its bound of runs of its own in the last hour. Inside the ping's transaction."""
    # The job's monitor row serialises its pings that record: of a flood, each counts the runs
    # the ones before it committed, so the bound holds (a fire's ping never waits here).
    list(Monitor.objects.select_for_update().filter(job_id=job.id).values_list("id", flat=True))
    now = now or db_now()
    if own_runs_in_window(job.id, now) >= app_settings.PING_OWN_RUNS_PER_HOUR:
        return Ping(None, "", False)
    changes = _changes(signal, status, text, cut, now)
    changes["started_at"] = now
    try:
        with transaction.atomic():  # a savepoint: a conflict below leaves the ping's transaction usable
            run = JobRun.objects.create(
                job=job,
                tenant_id=job.tenant_id,
                scheduled_at=now,
                trigger=Trigger.SCHEDULE,
                created_at=now,
                job_version=job.version,
                priority=job.priority,
                **changes,
            )
    except IntegrityError:
        # jobrun_one_per_fire: a run at this very instant exists (a fire, or another ping's
        # own run at the same clock reading). The ping is its duplicate, answered with it.
        taken = JobRun.objects.filter(job_id=job.id, scheduled_at=now).values("id", "state").first()
        if taken is None:
            raise
        return Ping(taken["id"], taken["state"], False, duplicate=True)
    _count_end(job, changes["state"])
    return Ping(run.id, changes["state"], True)


def own_runs_in_window(job_id: int, now: datetime) -> int:
    """Runs of its own (recorded by a ping that found no open fire) job `job_id` has in the hour
    up to `now`, counted up to the bound: a range of jobrun_one_per_fire (job_id, scheduled_at)
    over the job's runs of that hour. A run of its own is the only one created at its fire
    time (a fire is recorded after its time, a manual run has another trigger)."""
    bound = max(0, app_settings.PING_OWN_RUNS_PER_HOUR)
    return JobRun.objects.filter(
        job_id=job_id,
        scheduled_at__gt=now - OWN_RUNS_WINDOW,
        scheduled_at__lte=now,
        trigger=Trigger.SCHEDULE,
        created_at=models.F("scheduled_at"),
    )[:bound].count()


def _count_end(job: Job, state: str) -> None:
    """An ended run counts towards its job's pause after repeated failure (ledger.autopause);
    no statement for a job without one, so the ping's transaction ends with its UPDATE."""
    if job.pause_after_failures is not None and state in (RunState.SUCCEEDED, RunState.FAILED):
        autopause.count_ends([(job.id, state)], actor="checkin")
