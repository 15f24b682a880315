"""Chains at save (docs/chains.md): a job's after_job and after_states checked (within the
tenant, no schedule of its own, no loop), and each parent's has_children kept, which the
worker's end statement reads to know whether a run's end has children to start."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping

from django.db.models import Exists, OuterRef, RestrictedError

from scheduler_app import schedules
from scheduler_app.ledger.chains import CHAIN_STATES, DEFAULT_AFTER_STATES
from scheduler_app.models import Job, Tenant
from scheduler_app.validation import InvalidInput

# What a chained job may not have: it runs when its parent's runs end, never by a schedule.
OWN_SCHEDULE = ("cron", "every", "at", "start_at", "end_at", "jitter_seconds", "calendar")
MAX_CHAIN_DEPTH = 100  # a walk up the parents stops here (a loop already saved: not by these services)


def after_job_of(tenant: Tenant, value, *, among: Mapping[str, Job] | None = None) -> Job | None:
    """The parent a spec names (a job of `tenant`, by name or id); None for none. A job of
    another tenant is not found: a chain stays within its tenant. `among` (by name) stands
    for the tenant's saved jobs when they are not saved yet (a tenant's import)."""
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise InvalidInput("after_job", "must be the name (or id) of a job of the same tenant")
    if among is not None:
        found = among.get(value) if isinstance(value, str) else None
    else:
        jobs = Job.objects.filter(tenant=tenant)
        found = jobs.filter(id=value).first() if isinstance(value, int) else jobs.filter(name=value.strip()).first()
    if found is None:
        what = f"with id {value}" if isinstance(value, int) else f"named {value!r}"
        raise InvalidInput("after_job", f"tenant {tenant.slug!r} has no job {what} (a chain stays within one tenant)")
    return found


def check_after_states(value, *, chained: bool) -> list[str]:
    """The states of the parent's end that start the child, in a fixed order; default
    [succeeded] for a chained job, [] for others."""
    if value is None or value == []:
        return list(DEFAULT_AFTER_STATES) if chained else []
    choices = ", ".join(CHAIN_STATES)
    if not isinstance(value, (list, tuple)) or not all(isinstance(state, str) for state in value):
        raise InvalidInput("after_states", f"must be a list of: {choices}")
    for state in value:
        if state not in CHAIN_STATES:
            raise InvalidInput("after_states", f"{state!r} is not a state a chained job runs after (one of {choices})")
    if not chained:
        raise InvalidInput("after_states", "applies to a chained job only: set after_job too")
    return [state for state in CHAIN_STATES if state in value]


def check_no_schedule(spec) -> None:
    """Refuse a schedule on a chained job, naming its field."""
    for field in OWN_SCHEDULE:
        if getattr(spec, field) not in (None, "", 0):
            raise InvalidInput(
                field, "a chained job (after_job) has no schedule of its own: leave it blank, or clear after_job"
            )


def chained_schedule(spec, timezone: str) -> schedules.Schedule:
    """The schedule of a chained job: none but its zone (its runs' times are its parent's)."""
    check_no_schedule(spec)
    try:
        schedules.zone(timezone)
    except schedules.InvalidSchedule as exc:
        raise InvalidInput("timezone", exc.message) from None
    return schedules.Schedule(timezone=timezone)


def check_no_loop(job: Job | None, parent: Job | None) -> None:
    """Refuse a parent whose own parents lead back to `job` (the job being saved; None for
    a new job, which no job follows yet), naming the loop."""
    if parent is None or job is None:
        return
    path, current = [job.name, parent.name], parent
    for _ in range(MAX_CHAIN_DEPTH):
        if current.id == job.id:
            raise InvalidInput("after_job", f"makes a loop: {' -> '.join(path)}")
        if current.after_job_id is None:
            return
        current = Job.objects.only("id", "name", "after_job_id").get(id=current.after_job_id)
        path.append(current.name)
    raise InvalidInput("after_job", f"chains may be at most {MAX_CHAIN_DEPTH} jobs deep")


def lock_chains(tenant_id: int) -> None:
    """Serialise the chain edits of one tenant (its row, until the caller's transaction
    ends): two edits that each add half of a loop cannot both pass check_no_loop."""
    list(Tenant.objects.select_for_update(no_key=True).filter(id=tenant_id).values_list("id", flat=True))


def refresh_has_children(parent_ids: Iterable[int | None]) -> None:
    """Set each of these jobs' has_children to whether any job follows it now."""
    ids = {parent_id for parent_id in parent_ids if parent_id is not None}
    if ids:
        Job.objects.filter(id__in=ids).update(has_children=Exists(Job.objects.filter(after_job_id=OuterRef("id"))))


@contextlib.contextmanager
def refusing_orphans() -> Iterator[None]:
    """Turn the RESTRICT of a deletion that would leave a chained job without its parent
    into InvalidInput naming the children."""
    try:
        yield
    except RestrictedError as exc:
        names = sorted({f"{job.name}" for job in exc.restricted_objects})
        raise InvalidInput(
            "job", f"jobs run after it ({', '.join(names)}): delete them too, or clear their after_job first"
        ) from None


# A parent's end as a chained job's schedule reads it: "after extract succeeds".
STATE_VERBS = {"succeeded": "succeeds", "failed": "fails", "dead": "dies"}


def after_text(parent_name: str, states: Iterable[str]) -> str:
    """What starts a chained job's runs, in words: 'after extract succeeds', 'after extract
    fails or dies'."""
    verbs = [STATE_VERBS.get(state, f"ends {state}") for state in states] or [STATE_VERBS["succeeded"]]
    return f"after {parent_name} {' or '.join(verbs)}"


def describe(job: Job, schedule: schedules.Schedule) -> str:
    """What starts the job's runs: its schedule, or its parent's ends."""
    if job.after_job_id is None:
        return schedule.describe()
    return after_text(job.after_job.name, job.after_states)
