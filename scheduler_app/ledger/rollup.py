"""The hourly rollup of the ledger behind stats over wide windows (stats.py): for each hour
of fire times and each tenant, runs by state and histograms of the dispatch and start lags.
PostgreSQL only (the embedded SQLite ledger is small: its stats stay exact).

Writing. The beats roll up (roll_up(), from alerts.roll_ups on a beat's background thread, off
its turns) each hour once it ended
SETTLE ago, with INSERT ... ON CONFLICT DO NOTHING, so any number of beats may do it at
once; at most ROLL_UP_HOURS per call (a beat calls every CRONFLEET_ALERT_CHECK_SECONDS, so
after an upgrade the last 8 days are caught up in 192 calls, read live meanwhile), and
none older than KEEP (the widest stats window and a day). A run is counted in the state it had then: one that changes state later (a retry
that ends hours after its fire, a replay) keeps its old state in the rollup. Pruning the
ledger leaves the rollup alone: counts outlive the runs they count.

Reading. window_stats() reads the rolled-up hours inside a window from the rollup and the
rest (the partial hours at both edges, the hours not rolled up yet) from the ledger, both
through the same lag buckets, and merges them: counts are exact for what is read live and
as-of-roll-up for the rest; lag percentiles come from the merged histogram.

Lag histograms. Bucket 0 holds lags under MIN_LAG (1 ms, and negative ones); bucket i >= 1
holds [MIN_LAG * R^(i-1), MIN_LAG * R^i) with R = 2^(1/8); the last bucket everything from
MAX_LAG (8 days) on. A percentile is the geometric middle of the bucket holding that rank
(nearest rank), so it is within R^(1/2) - 1 = 4.4 % of the exact figure for lags between
1 ms and 8 days, 0 below 1 ms.
"""

from __future__ import annotations

import json
import math
from datetime import datetime, timedelta

from django.db import connection, transaction

from scheduler_app.ledger.lags import ALL_TENANTS, DISPATCH_LAG_SQL, START_LAG_SQL, scope
from scheduler_app.models import RunHour, RunState

HOUR = timedelta(hours=1)
SETTLE = timedelta(minutes=10)  # an hour is rolled up once its end is this old
KEEP = timedelta(days=8)  # no hour older than this is rolled up (the API's widest window is 7 days)
# Hours one roll_up() call adds at most. One: the statement reads every run of the hour
# (65-95 ms for 6,900 runs measured, about 10 us a run), so at 100,000 fires a minute an
# hour's roll-up is about a minute of one core, on the beat's background thread, not its turn.
ROLL_UP_HOURS = 1
MIN_LAG = 0.001
STEPS_PER_DOUBLING = 8
RATIO = 2 ** (1 / STEPS_PER_DOUBLING)
MAX_LAG = 8 * 86400.0
LAST_BUCKET = math.ceil(math.log2(MAX_LAG / MIN_LAG) * STEPS_PER_DOUBLING) + 1
PRECISION = math.sqrt(RATIO) - 1


def bucket_sql(lag: str) -> str:
    """The bucket of the lag expression `lag` (seconds), in SQL; NULL when it is NULL."""
    return (
        f"CASE WHEN ({lag}) IS NULL THEN NULL WHEN ({lag}) < {MIN_LAG} THEN 0 ELSE least({LAST_BUCKET}, "
        f"floor(ln(({lag}) / {MIN_LAG}) * {STEPS_PER_DOUBLING / math.log(2)!r})::int + 1) END"
    )


def bucket_of(lag: float) -> int:
    """bucket_sql in Python (the tests check the two agree)."""
    if lag < MIN_LAG:
        return 0
    return min(LAST_BUCKET, math.floor(math.log(lag / MIN_LAG) * STEPS_PER_DOUBLING / math.log(2)) + 1)


def bucket_value(bucket: int) -> float:
    """The lag a bucket stands for: its geometric middle (0 for bucket 0, the lower edge for the last)."""
    if bucket == 0:
        return 0.0
    if bucket >= LAST_BUCKET:
        return MIN_LAG * RATIO ** (LAST_BUCKET - 1)
    return MIN_LAG * RATIO ** (bucket - 0.5)


def hist_percentiles(hist: list[int], fractions: tuple[float, ...]) -> list[float] | None:
    """The lag at each fraction (nearest rank over the runs counted), None when none were."""
    total = sum(hist)
    if not total:
        return None
    found = []
    for fraction in fractions:
        rank = min(total, max(1, math.ceil(fraction * total)))
        seen = 0
        for bucket, count in enumerate(hist):
            seen += count
            if seen >= rank:
                found.append(bucket_value(bucket))
                break
    return found


def add_into(total: list[int], hist: list[int]) -> list[int]:
    if len(total) < len(hist):
        total.extend([0] * (len(hist) - len(total)))
    for i, count in enumerate(hist):
        total[i] += count
    return total


def trimmed(hist: list[int]) -> list[int]:
    end = len(hist)
    while end and not hist[end - 1]:
        end -= 1
    return hist[:end]


# --- one piece of the ledger, live -------------------------------------------------------------


# Runs by state and per lag bucket, scheduled in [start, end), of one tenant or all
# (lags.scope(): jobrun_tenant_recent_idx or jobrun_state_recent_idx). Lags count scheduled
# runs only (lags.py's definitions). {hour} is date_trunc of the hour (rolling up) or NULL.
def pieces_sql(scope: str, *, by_hour: bool) -> str:
    dispatch = f"CASE WHEN trigger = 'schedule' THEN {bucket_sql(DISPATCH_LAG_SQL)} END"
    start = f"CASE WHEN trigger = 'schedule' THEN {bucket_sql(START_LAG_SQL)} END"
    hour = "date_trunc('hour', scheduled_at)" if by_hour else "NULL::timestamptz"
    keys = "hour, tenant_id" if by_hour else "hour"
    return f"""
SELECT hour, {"tenant_id" if by_hour else "NULL::bigint"}, GROUPING(state), GROUPING(dispatch), state, dispatch, start,
       count(*)
  FROM (SELECT {hour} AS hour, tenant_id, state, {dispatch} AS dispatch, {start} AS start
          FROM scheduler_app_jobrun
         WHERE {scope} AND scheduled_at >= %(start)s AND scheduled_at < %(end)s) AS run
 GROUP BY GROUPING SETS (({keys}, state), ({keys}, dispatch), ({keys}, start))
"""


class Tally:
    """Counts by state and the two lag histograms, added up from pieces."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.dispatch: list[int] = []
        self.start: list[int] = []

    def add_row(self, no_state: int, no_dispatch: int, state, dispatch, start, count: int) -> None:
        if not no_state:
            self.counts[state] = self.counts.get(state, 0) + count
        elif not no_dispatch:
            if dispatch is not None:
                add_into(self.dispatch, [0] * dispatch + [count])
        elif start is not None:
            add_into(self.start, [0] * start + [count])

    def add(self, other: Tally) -> None:
        for state, count in other.counts.items():
            self.counts[state] = self.counts.get(state, 0) + count
        add_into(self.dispatch, other.dispatch)
        add_into(self.start, other.start)


def live(scope: str, params: dict, start: datetime, end: datetime) -> Tally:
    """The runs scheduled in [start, end) of the scope, read from the ledger."""
    tally = Tally()
    with connection.cursor() as cursor:
        cursor.execute(pieces_sql(scope, by_hour=False), {**params, "start": start, "end": end})
        for _, _, no_state, no_dispatch, state, dispatch, begin, count in cursor.fetchall():
            tally.add_row(no_state, no_dispatch, state, dispatch, begin, count)
    return tally


# --- rolling up ---------------------------------------------------------------------------------


def floor_hour(at: datetime) -> datetime:
    return at.replace(minute=0, second=0, microsecond=0)


def roll_up(now: datetime, *, max_hours: int = ROLL_UP_HOURS) -> int:
    """Roll up the hours ended SETTLE before `now` after the last one rolled up (at most
    max_hours, none older than KEEP); return how many. Safe in several beats at once."""
    if connection.vendor != "postgresql":
        return 0
    end = floor_hour(now - SETTLE)
    last = RunHour.objects.filter(tenant_id=0).order_by("-hour").values_list("hour", flat=True).first()
    start = max(last + HOUR if last else end - KEEP, floor_hour(now - KEEP) + HOUR)
    end = min(end, start + max_hours * HOUR)
    if end <= start:
        return 0
    tallies: dict[tuple[datetime, int], Tally] = {}
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL jit = off")  # a big GROUPING SETS plan compiles longer than it runs
        cursor.execute(
            pieces_sql(ALL_TENANTS, by_hour=True), {"states": list(RunState.values), "start": start, "end": end}
        )
        for hour, tenant_id, no_state, no_dispatch, state, dispatch, begin, count in cursor.fetchall():
            for key in ((hour, tenant_id), (hour, 0)):
                tallies.setdefault(key, Tally()).add_row(no_state, no_dispatch, state, dispatch, begin, count)
        hour = start
        while hour < end:
            tallies.setdefault((hour, 0), Tally())  # the marker, also for an hour without runs
            hour += HOUR
        rolled_at = now
        RunHour.objects.bulk_create(
            [
                RunHour(
                    hour=hour,
                    tenant_id=tenant_id,
                    counts=tally.counts,
                    dispatch_lags=trimmed(tally.dispatch),
                    start_lags=trimmed(tally.start),
                    rolled_at=rolled_at,
                )
                for (hour, tenant_id), tally in sorted(tallies.items())
            ],
            ignore_conflicts=True,
        )
    return int((end - start) / HOUR)


# --- reading ------------------------------------------------------------------------------------

ROLLED_SQL = """
SELECT marker.hour, run.counts, run.dispatch_lags, run.start_lags
  FROM scheduler_app_runhour AS marker
  LEFT JOIN scheduler_app_runhour AS run ON run.hour = marker.hour AND run.tenant_id = %(key)s
 WHERE marker.tenant_id = 0 AND marker.hour >= %(start)s AND marker.hour < %(end)s
"""


def window_stats(tenant_id: int | None, since: datetime, until: datetime) -> Tally:
    """Runs scheduled in (since, until] of one tenant or (None) all: the rolled-up hours
    inside it from the rollup, the rest live."""
    clause, params = scope(tenant_id)
    # (since, until] as a half-open range: timestamps are whole microseconds.
    low, high = since + timedelta(microseconds=1), until + timedelta(microseconds=1)
    first = floor_hour(low) + (HOUR if floor_hour(low) < low else timedelta(0))
    last = floor_hour(high)
    tally = Tally()
    rolled: list[datetime] = []
    if first < last:
        with connection.cursor() as cursor:
            cursor.execute(ROLLED_SQL, {"key": tenant_id or 0, "start": first, "end": last})
            for hour, counts, dispatch, start in cursor.fetchall():
                rolled.append(hour)
                if counts is not None:  # JSON text: Django's PostgreSQL backend leaves jsonb undecoded
                    for state, count in json.loads(counts).items():
                        tally.counts[state] = tally.counts.get(state, 0) + count
                    add_into(tally.dispatch, json.loads(dispatch))
                    add_into(tally.start, json.loads(start))
    for start, end in gaps(low, high, sorted(rolled)):
        tally.add(live(clause, params, start, end))
    return tally


def gaps(low: datetime, high: datetime, rolled: list[datetime]) -> list[tuple[datetime, datetime]]:
    """The pieces of [low, high) outside the rolled-up hours (sorted), adjacent ones joined."""
    found, at = [], low
    for hour in rolled:
        if hour > at:
            found.append((at, hour))
        at = max(at, hour + HOUR)
    if at < high:
        found.append((at, high))
    return found
