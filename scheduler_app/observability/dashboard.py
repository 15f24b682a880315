"""The staff dashboard's numbers (/admin/dashboard/): what the fleet did in the last hour and
day, and what is due in the next hour. On PostgreSQL the statements below; on the embedded
SQLite demo overview_in_python() computes the same figures in Python from the runs that
finished in the last day (a demo-sized ledger: no rollup there, every minute is read live).

One definition of the totals (totals_of): runs finished = succeeded + failed + dead, the
failure rate = (failed + dead) / finished; the other outcomes (retrying, lost, cancelled,
skipped) are counted apart. Every panel counts the runs by when they finished, in the same
windows (day_window): the last hour, and the 24 hours that end with it. The hour is read live;
the day before it comes from RunMinute as far as the beats have rolled it up, and the minutes
after that (a rollup running behind) are read live too, so the header's totals, the charts,
the noisiest tenants and the failing jobs all add up to the same runs.

It must render in well under 300 ms with ten million runs in the ledger, so nothing here
reads more than an hour of runs:

- the last hour is read live from the runs that finished in it, through
  jobrun_finished_brin (a BRIN index on finished_at: runs are written in about the order
  they finish, so a few hundred index bytes find an hour's pages);
- the rest of the day comes from RunMinute, one row per minute and tenant of finished runs by
  outcome, rolled up by the beats (roll_up(), from alerts.roll_ups on a beat's background thread): a minute
  is rolled up once it is CLOSED_AFTER old, with INSERT ... ON CONFLICT DO NOTHING, so any
  number of beats may do it at once;
- the minutes not rolled up yet are read live like the hour (normally a minute or two);
- top failing jobs read only failed and dead runs (jobrun_state_recent_idx);
- the forecast groups the jobs due within the hour by schedule and calendar (job_due_idx)
  and expands each group's fires once, its calendars read in one query as the beat reads
  them (models.business_calendars);
- the jobs that paused themselves after repeated failure (auto_paused) are read from the job
  table (no index serves auto_paused_at: a partial one is the fix if job tables grow large).

overview(now, tenant_id=...) is the same for one tenant (/admin/dashboard/?tenant=<slug>):
every statement gains "AND tenant_id = %(tenant)s" (RunMinute has a row per tenant and
minute; the marker rows, tenant 0, say which minutes are rolled up).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import connection, models

from scheduler_app import schedules
from scheduler_app.ledger import lags
from scheduler_app.models import Job, JobRun, RunMinute, RunState, Tenant, Trigger, business_calendars, schedule_of

MINUTE = timedelta(minutes=1)
HOUR = timedelta(hours=1)
DAY = timedelta(days=1)
DAY_BUCKET = timedelta(minutes=15)  # the day's charts: one bar per quarter hour (runs per minute, averaged)
CLOSED_AFTER = timedelta(seconds=15)  # a minute is rolled up once its end is this old (commits have landed)
ROLL_UP_MINUTES = 60  # minutes one roll_up() call adds at most (catching up after a pause)
OUTCOMES = ("succeeded", "failed", "dead", "retrying", "lost", "cancelled", "skipped")
FINISHED = ("succeeded", "failed", "dead")  # "runs finished" everywhere on the page (totals_of)
TOP = 8


ROLL_UP_SQL = """
WITH span AS (
    SELECT generate_series(%(start)s::timestamptz, %(end)s::timestamptz - interval '1 minute',
                           interval '1 minute') AS minute
), counted AS (
    SELECT date_trunc('minute', finished_at) AS minute, tenant_id,
           count(*) FILTER (WHERE state = 'succeeded') AS succeeded, count(*) FILTER (WHERE state = 'failed') AS failed,
           count(*) FILTER (WHERE state = 'dead') AS dead, count(*) FILTER (WHERE state = 'retrying') AS retrying,
           count(*) FILTER (WHERE state = 'lost') AS lost, count(*) FILTER (WHERE state = 'cancelled') AS cancelled,
           count(*) FILTER (WHERE state = 'skipped') AS skipped
      FROM scheduler_app_jobrun
     WHERE finished_at >= %(start)s AND finished_at < %(end)s
     GROUP BY 1, 2
)
INSERT INTO scheduler_app_runminute (minute, tenant_id, succeeded, failed, dead, retrying, lost, cancelled, skipped)
SELECT minute, tenant_id, succeeded, failed, dead, retrying, lost, cancelled, skipped FROM counted
 UNION ALL
SELECT minute, 0, 0, 0, 0, 0, 0, 0, 0 FROM span
ON CONFLICT (minute, tenant_id) DO NOTHING
"""


def roll_up(now: datetime, *, max_minutes: int = ROLL_UP_MINUTES) -> int:
    """Roll up the closed minutes after the last one rolled up (at most max_minutes, and
    none older than a day); return how many minutes. Safe to run in several beats at once."""
    if connection.vendor != "postgresql":
        return 0
    end = truncate(now - CLOSED_AFTER)
    last = RunMinute.objects.filter(tenant_id=0).aggregate(last=models.Max("minute"))["last"]
    start = max(last + MINUTE if last else end - DAY, end - DAY)
    end = min(end, start + max_minutes * MINUTE)
    if end <= start:
        return 0
    with connection.cursor() as cursor:
        cursor.execute(ROLL_UP_SQL, {"start": start, "end": end})
    return int((end - start) / MINUTE)


def truncate(at: datetime, step: timedelta = MINUTE) -> datetime:
    seconds = step.total_seconds()
    return datetime.fromtimestamp(at.timestamp() // seconds * seconds, tz=at.tzinfo)


# --- the last hour, live ----------------------------------------------------------------------

# Lags as lags.py defines them, for a scheduled fire's first attempt: dispatch lag (fire time
# to its first trip to the broker) and start lag (fire time to a worker's start), by the
# minute the run finished in (the hour's runs are read through the BRIN index on finished_at).
HOUR_SQL = """
SELECT date_trunc('minute', finished_at) AS minute, tenant_id, state, count(*),
       percentile_cont(0.5) WITHIN GROUP (ORDER BY {dispatch_lag}) FILTER (WHERE {first_fire}),
       percentile_cont(0.99) WITHIN GROUP (ORDER BY {dispatch_lag}) FILTER (WHERE {first_fire}),
       percentile_cont(0.5) WITHIN GROUP (ORDER BY {start_lag}) FILTER (WHERE {first_fire} AND started_at IS NOT NULL),
       percentile_cont(0.99) WITHIN GROUP (ORDER BY {start_lag}) FILTER (WHERE {first_fire} AND started_at IS NOT NULL)
  FROM scheduler_app_jobrun
 WHERE finished_at >= %(start)s AND finished_at < %(end)s {{hour_tenant}}
 GROUP BY GROUPING SETS ((1, 3), (1), (2, 3))
""".format(
    dispatch_lag=lags.DISPATCH_LAG_SQL,
    start_lag="extract(epoch FROM started_at - scheduled_at)",
    first_fire="trigger = 'schedule' AND attempt = 1",
)

# The minutes before the last hour that are rolled up, by quarter hour and tenant.
DAY_SQL = """
SELECT date_bin(%(bucket)s, minute, %(origin)s) AS bucket, tenant_id,
       sum(succeeded), sum(failed), sum(dead), sum(retrying), sum(lost), sum(cancelled), sum(skipped)
  FROM scheduler_app_runminute
 WHERE minute >= %(start)s AND minute < %(end)s AND tenant_id <> 0 {tenant}
 GROUP BY 1, 2
"""

# The minutes before the last hour that are not rolled up yet, read live the same way.
GAP_SQL = """
SELECT date_bin(%(bucket)s, finished_at, %(origin)s) AS bucket, tenant_id, state, count(*)
  FROM scheduler_app_jobrun
 WHERE finished_at >= %(start)s AND finished_at < %(end)s {hour_tenant}
 GROUP BY 1, 2, 3
"""

# The state index leads with state: only the failed and dead runs scheduled in the last two
# days are read, and counted when they finished in the day's window (as the totals count them).
FAILING_SQL = """
SELECT failing.job_id, tenant.slug, job.name, failing.failures, failing.last_at
  FROM (SELECT job_id, count(*) AS failures, max(scheduled_at) AS last_at
          FROM scheduler_app_jobrun
         WHERE state IN ('failed', 'dead') AND scheduled_at > %(oldest)s
           AND finished_at >= %(start)s AND finished_at < %(end)s {tenant}
         GROUP BY job_id
         ORDER BY failures DESC, job_id
         LIMIT %(top)s) AS failing
  JOIN scheduler_app_job AS job ON job.id = failing.job_id
  JOIN scheduler_app_tenant AS tenant ON tenant.id = job.tenant_id
 ORDER BY failing.failures DESC, failing.job_id
"""

# The jobs due within the hour, grouped by schedule (job_due_idx: enabled, next_run_at).
FORECAST_SQL = """
SELECT cron, timezone, every_seconds, run_at, calendar_id, calendar_policy,
       date_trunc('minute', next_run_at) AS first_minute, count(*)
  FROM scheduler_app_job
 WHERE enabled AND next_run_at IS NOT NULL AND next_run_at < %(end)s {tenant}
 GROUP BY 1, 2, 3, 4, 5, 6, 7
"""


@dataclass
class Overview:
    now: datetime
    hour_minutes: list[datetime] = field(default_factory=list)
    hour_counts: dict[str, list[int]] = field(default_factory=dict)
    hour_p50: list[float | None] = field(default_factory=list)  # start lag
    hour_p99: list[float | None] = field(default_factory=list)
    hour_dispatch_p50: list[float | None] = field(default_factory=list)
    hour_dispatch_p99: list[float | None] = field(default_factory=list)
    day_buckets: list[datetime] = field(default_factory=list)
    day_counts: dict[str, list[int]] = field(default_factory=dict)  # runs per quarter hour
    day_failure_rate: list[float | None] = field(default_factory=list)
    day_start: datetime | None = None  # the day's window: [day_start, hour_minutes[-1] + 1 minute)
    forecast_minutes: list[datetime] = field(default_factory=list)
    forecast: list[int] = field(default_factory=list)
    failing_jobs: list[tuple] = field(default_factory=list)
    auto_paused: list[tuple] = field(default_factory=list)  # (job id, tenant slug, name, paused at, note), newest first
    auto_paused_count: int = 0
    noisy_tenants: list[tuple] = field(default_factory=list)  # (slug, runs finished, failed + dead), TOP
    totals: dict[str, dict] = field(default_factory=dict)
    computed_in_python: bool = False  # the SQLite demo: overview_in_python()


def scoped(sql: str, tenant_id: int | None) -> str:
    """`sql` for every tenant, or with its {tenant} placeholders limiting it to one."""
    one = tenant_id is not None
    return sql.format(
        tenant="AND tenant_id = %(tenant)s" if one else "",
        # "+ 0": no index on tenant_id applies. The hour's runs are a few BRIN
        # ranges; ANDed with jobrun_tenant_state_idx, PostgreSQL read all of the
        # tenant's entries first (1,000,000: 99 of 129 ms at 10,000,000 runs).
        hour_tenant="AND tenant_id + 0 = %(tenant)s" if one else "",
    )


def day_window(now: datetime) -> tuple[datetime, datetime, datetime]:
    """The windows every panel counts in: (day start, hour start, end). Both end with the
    current minute; the day is the 24 hours before that."""
    end = truncate(now) + MINUTE
    return end - DAY, end - HOUR, end


def day_buckets(start: datetime, now: datetime) -> list[datetime]:
    """The quarter hours from the one holding `start` to the one holding `now`."""
    first = truncate(start, DAY_BUCKET)
    return [first + DAY_BUCKET * i for i in range(int((truncate(now, DAY_BUCKET) - first) / DAY_BUCKET) + 1)]


def overview(now: datetime, tenant_id: int | None = None) -> Overview:
    if connection.vendor != "postgresql":
        return overview_in_python(now, tenant_id)
    found = Overview(now=now)
    day_start, _, end = day_window(now)
    tenants: defaultdict[int, list[int]] = defaultdict(lambda: [0, 0])
    with connection.cursor() as cursor:
        last_hour(cursor, found, now, tenant_id, tenants)
        last_day(cursor, found, now, tenant_id, tenants)
        window = {"oldest": day_start - DAY, "start": day_start, "end": end, "top": TOP, "tenant": tenant_id}
        cursor.execute(scoped(FAILING_SQL, tenant_id), window)
        found.failing_jobs = cursor.fetchall()
        cursor.execute(scoped(FORECAST_SQL, tenant_id), {"end": now + HOUR, "tenant": tenant_id})
        groups = cursor.fetchall()
    found.noisy_tenants = noisiest(tenants)
    found.forecast_minutes, found.forecast = forecast(groups, now, group_calendars(groups, now))
    auto_paused(found, tenant_id)
    return found


def count_finished(tenants: dict[int, list[int]], tenant: int, state: str, count: int) -> None:
    """Add `count` runs of `state` to a tenant's [runs finished, failed + dead] (totals_of's definition)."""
    tenants[tenant][0] += count if state in FINISHED else 0
    tenants[tenant][1] += count if state in ("failed", "dead") else 0


def noisiest(tenants: dict[int, list[int]]) -> list[tuple]:
    """The TOP tenants by runs finished in the day: (slug, runs, failed + dead)."""
    top = sorted(((t, runs, failures) for t, (runs, failures) in tenants.items() if runs), key=lambda r: -r[1])[:TOP]
    slugs = dict(Tenant.objects.filter(id__in=[row[0] for row in top]).values_list("id", "slug"))
    return sorted(((slugs.get(t, str(t)), runs, failures) for t, runs, failures in top), key=lambda r: (-r[1], r[0]))


def auto_paused(found: Overview, tenant_id: int | None) -> None:
    """The jobs paused now because they paused themselves (ledger.autopause): how many, and
    the TOP latest."""
    jobs = Job.objects.filter(enabled=False, auto_paused_at__isnull=False)
    if tenant_id is not None:
        jobs = jobs.filter(tenant_id=tenant_id)
    found.auto_paused = list(
        jobs.order_by("-auto_paused_at", "-id").values_list(
            "id", "tenant__slug", "name", "auto_paused_at", "paused_note"
        )[:TOP]
    )
    found.auto_paused_count = len(found.auto_paused) if len(found.auto_paused) < TOP else jobs.count()


def last_hour(cursor, found: Overview, now: datetime, tenant_id: int | None, tenants: dict) -> None:
    _, start, end = day_window(now)
    minutes = [start + MINUTE * i for i in range(60)]
    index = {minute: i for i, minute in enumerate(minutes)}
    counts = {state: [0] * 60 for state in OUTCOMES}
    p50: list[float | None]
    p99: list[float | None]
    dispatch50: list[float | None]
    dispatch99: list[float | None]
    p50, p99, dispatch50, dispatch99 = [None] * 60, [None] * 60, [None] * 60, [None] * 60
    cursor.execute(scoped(HOUR_SQL, tenant_id), {"start": start, "end": end, "tenant": tenant_id})
    for minute, tenant, state, count, d50, d99, lag50, lag99 in cursor.fetchall():
        if minute is None:  # the (tenant, state) rows of the grouping sets
            count_finished(tenants, tenant, state, count)
            continue
        i = index.get(minute)
        if i is None:
            continue
        if state is None:  # the minute's row of the grouping sets: every state
            p50[i], p99[i], dispatch50[i], dispatch99[i] = lag50, lag99, d50, d99
        elif state in counts:
            counts[state][i] = count
    found.hour_minutes, found.hour_counts, found.hour_p50, found.hour_p99 = minutes, counts, p50, p99
    found.hour_dispatch_p50, found.hour_dispatch_p99 = dispatch50, dispatch99
    found.totals["hour"] = totals_of({state: sum(values) for state, values in counts.items()})


def last_day(cursor, found: Overview, now: datetime, tenant_id: int | None, tenants: dict) -> None:
    """The day before the last hour: its rolled-up minutes from RunMinute, the minutes the
    beats have not rolled up yet read live from the runs (the same counts), then the hour's."""
    day_start, hour_start, _ = day_window(now)
    buckets = day_buckets(day_start, now)
    index = {bucket: i for i, bucket in enumerate(buckets)}
    sums = {state: [0] * len(buckets) for state in OUTCOMES}
    cursor.execute(
        "SELECT max(minute) FROM scheduler_app_runminute WHERE tenant_id = 0 AND minute >= %s AND minute < %s",
        [day_start, hour_start],
    )
    last = cursor.fetchone()[0]
    rolled_end = last + MINUTE if last is not None else day_start
    window = {"bucket": DAY_BUCKET, "origin": buckets[0], "tenant": tenant_id}
    cursor.execute(scoped(DAY_SQL, tenant_id), {**window, "start": day_start, "end": rolled_end})
    for bucket, tenant, *values in cursor.fetchall():
        for state, value in zip(OUTCOMES, values, strict=True):
            sums[state][index[bucket]] += value
            count_finished(tenants, tenant, state, value)
    cursor.execute(scoped(GAP_SQL, tenant_id), {**window, "start": rolled_end, "end": hour_start})
    for bucket, tenant, state, count in cursor.fetchall():
        if state in sums:
            sums[state][index[bucket]] += count
            count_finished(tenants, tenant, state, count)
    add_hour_into_day(found, index, sums)
    finish_day(found, buckets, sums, day_start)


def add_hour_into_day(found: Overview, index: dict, sums: dict[str, list]) -> None:
    """The last hour's live counts into the day's buckets (those minutes are not read from RunMinute)."""
    for i, minute in enumerate(found.hour_minutes):
        j = index.get(truncate(minute, DAY_BUCKET))
        if j is None:
            continue
        for state, values in found.hour_counts.items():
            sums[state][j] += values[i]


def finish_day(found: Overview, buckets: list[datetime], sums: dict[str, list], day_start: datetime) -> None:
    found.day_buckets, found.day_start = buckets, day_start
    found.day_counts = sums
    found.day_failure_rate = [
        100 * (sums["failed"][i] + sums["dead"][i]) / finished
        if (finished := sums["succeeded"][i] + sums["failed"][i] + sums["dead"][i])
        else None
        for i in range(len(buckets))
    ]
    found.totals["day"] = totals_of({state: sum(values) for state, values in sums.items()})


def totals_of(counts: dict[str, int]) -> dict:
    """The one definition of a total: runs finished (succeeded, failed or dead), how many of
    them failed or are dead, that share in %, and the other outcomes apart."""
    finished = counts["succeeded"] + counts["failed"] + counts["dead"]
    failures = counts["failed"] + counts["dead"]
    return {
        "runs": finished,
        "failures": failures,
        "other": sum(counts.values()) - finished,
        "failure_rate": 100 * failures / finished if finished else None,
    }


# --- the embedded SQLite demo: the same figures, computed in Python --------------------------


def percentile_cont(values: list[float], fraction: float) -> float | None:
    """PostgreSQL's percentile_cont: linear interpolation between the two nearest ranks."""
    if not values:
        return None
    ordered = sorted(values)
    position = fraction * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def overview_in_python(now: datetime, tenant_id: int | None = None) -> Overview:
    """overview() without PostgreSQL's functions (percentile_cont, date_bin, date_trunc,
    FILTER, GROUPING SETS): the runs that finished in the day's window are read once and
    counted here, every minute live. Meant for the demo's small ledger."""
    found = Overview(now=now, computed_in_python=True)
    day_start, hour_start, end = day_window(now)
    found.hour_minutes = [hour_start + MINUTE * i for i in range(60)]
    hour_index = {minute: i for i, minute in enumerate(found.hour_minutes)}
    buckets = day_buckets(day_start, now)
    day_index = {bucket: i for i, bucket in enumerate(buckets)}
    counts = {state: [0] * 60 for state in OUTCOMES}
    dispatch: list[list[float]] = [[] for _ in range(60)]
    start: list[list[float]] = [[] for _ in range(60)]
    sums = {state: [0] * len(buckets) for state in OUTCOMES}
    runs = JobRun.objects.filter(finished_at__gte=day_start, finished_at__lt=end)
    if tenant_id is not None:
        runs = runs.filter(tenant_id=tenant_id)
    tenants: defaultdict[int, list[int]] = defaultdict(lambda: [0, 0])
    for finished_at, state, tenant, trigger, attempt, scheduled_at, dispatched_at, enqueued_at, started_at in (
        runs.order_by()
        .values_list(
            "finished_at",
            "state",
            "tenant_id",
            "trigger",
            "attempt",
            "scheduled_at",
            "dispatched_at",
            "enqueued_at",
            "started_at",
        )
        .iterator()
    ):
        if state not in sums:
            continue
        minute = truncate(finished_at)
        count_finished(tenants, tenant, state, 1)
        i = hour_index.get(minute)
        if i is None:  # before the hour: counted by quarter hour
            sums[state][day_index[truncate(minute, DAY_BUCKET)]] += 1
            continue
        counts[state][i] += 1  # the hour, by the minute it finished in
        if trigger == Trigger.SCHEDULE and attempt == 1:
            if (reached := dispatched_at or enqueued_at) is not None:
                dispatch[i].append(lags.dispatch_lag(scheduled_at, reached))
            if started_at is not None:
                start[i].append((started_at - scheduled_at).total_seconds())
    found.hour_counts = counts
    found.hour_dispatch_p50 = [percentile_cont(values, 0.5) for values in dispatch]
    found.hour_dispatch_p99 = [percentile_cont(values, 0.99) for values in dispatch]
    found.hour_p50 = [percentile_cont(values, 0.5) for values in start]
    found.hour_p99 = [percentile_cont(values, 0.99) for values in start]
    found.totals["hour"] = totals_of({state: sum(values) for state, values in counts.items()})
    add_hour_into_day(found, day_index, sums)
    finish_day(found, buckets, sums, day_start)
    found.noisy_tenants = noisiest(tenants)
    found.failing_jobs = failing_in_python(day_start, end, tenant_id)
    due = Job.objects.filter(enabled=True, next_run_at__isnull=False, next_run_at__lt=now + HOUR)
    if tenant_id is not None:
        due = due.filter(tenant_id=tenant_id)
    groups: dict[tuple, int] = defaultdict(int)
    for *key, next_run_at in due.values_list(
        "cron", "timezone", "every_seconds", "run_at", "calendar_id", "calendar_policy", "next_run_at"
    ):
        groups[(*key, truncate(next_run_at))] += 1
    rows = [(*key, jobs) for key, jobs in groups.items()]
    found.forecast_minutes, found.forecast = forecast(rows, now, group_calendars(rows, now))
    auto_paused(found, tenant_id)
    return found


def failing_in_python(start: datetime, end: datetime, tenant_id: int | None) -> list[tuple]:
    """FAILING_SQL through the ORM: the jobs with the most failed and dead runs that finished in the window."""
    failing = JobRun.objects.filter(
        state__in=(RunState.FAILED, RunState.DEAD),
        scheduled_at__gt=start - DAY,
        finished_at__gte=start,
        finished_at__lt=end,
    )
    if tenant_id is not None:
        failing = failing.filter(tenant_id=tenant_id)
    rows = list(
        failing.order_by()
        .values("job_id")
        .annotate(failures=models.Count("id"), last_at=models.Max("scheduled_at"))
        .order_by("-failures", "job_id")[:TOP]
    )
    jobs = {job.pk: job for job in Job.objects.filter(id__in=[row["job_id"] for row in rows]).select_related("tenant")}
    return [
        (row["job_id"], jobs[row["job_id"]].tenant.slug, jobs[row["job_id"]].name, row["failures"], row["last_at"])
        for row in rows
        if row["job_id"] in jobs
    ]


def group_calendars(groups: list[tuple], now: datetime) -> dict[int, schedules.BusinessCalendar]:
    """The calendars of the forecast's groups, by id: one query, none without calendars."""
    return business_calendars((group[4] for group in groups), now.year)


def forecast(
    groups: list[tuple], now: datetime, calendars: dict[int, schedules.BusinessCalendar] | None = None
) -> tuple[list[datetime], list[int]]:
    """Fires due per minute for the next 60 minutes, from the jobs' schedules with their
    calendars (group_fires). Overdue jobs count in the first minute."""
    start = truncate(now)
    minutes = [start + MINUTE * i for i in range(60)]
    counts: defaultdict[datetime, int] = defaultdict(int)
    for group in groups:
        for at in group_fires(group[:7], start, start + HOUR, calendars):
            counts[max(truncate(at), start)] += group[7]
    return minutes, [counts.get(minute, 0) for minute in minutes]


def group_fires(
    group: tuple, start: datetime, end: datetime, calendars: dict[int, schedules.BusinessCalendar] | None = None
) -> list[datetime]:
    """The fires before `end` of one group of jobs sharing a schedule, calendar and first
    minute, (cron, timezone, every_seconds, run_at, calendar_id, calendar_policy,
    first_minute), as the beat plans them (jitter can move a fire into the next minute;
    end_at is not applied: both are small). A fire its calendar skips is left out; one it
    moves is where it moves to (next_run_at is already a moved fire). The first fire may be
    before `start` (overdue): callers count it as due at `start`. Also the autoscaling
    forecast's (forecast.py)."""
    cron, zone, every, run_at, calendar_id, policy, first_minute = group
    calendar = (calendars or {}).get(calendar_id) if calendar_id is not None else None
    first = max(first_minute, truncate(start))  # the fires after the minute of an overdue one
    try:
        schedule = schedule_of(
            cron,
            zone,
            every,
            run_at,
            first_minute if every else None,
            None,
            None,
            calendar=calendar,
            calendar_policy=policy,
        )
        # A span holds at most one cron fire a minute (minute resolution), or span / every.
        span = int((end - first).total_seconds())
        count = 0 if run_at and not cron and not every else (span // 60 + 1 if cron else span // every + 1)
        fires = schedules.preview(schedule, first + MINUTE - timedelta(microseconds=1), count) if count > 0 else []
    except (schedules.InvalidSchedule, ValueError):
        fires, schedule = [], None
    found = []
    for at in [first_minute, *fires]:
        if at >= end:
            break
        if schedule is None or not skipped_by_calendar(schedule, at):
            found.append(at)
    return found


def skipped_by_calendar(schedule: schedules.Schedule, at: datetime) -> bool:
    """Whether the beat records the fire at `at` as skipped by the job's calendar (policy
    skip, a non-business day in the job's zone) rather than running it."""
    if schedule.calendar is None or schedule.calendar_policy != schedules.CalendarPolicy.SKIP:
        return False
    return schedules.shift_fire(schedule.calendar, schedule.calendar_policy, schedule.timezone, at) is None
