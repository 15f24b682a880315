"""Schedule arithmetic. No database, no clock, no Django.

Every function takes the instants it reasons about as arguments. Datetimes in and out are
timezone-aware and in UTC; the job's own zone is used only inside the calculation.

Cron expressions are evaluated in the job's IANA zone with Debian cron's DST rules. A
fixed-time job (no `*` starting its minute or hour field) follows the wall clock, as cronsim
walks it: a local time skipped by spring-forward fires right after the gap, one in the
repeated autumn hour fires once. An hourly or finer job fires at every real instant whose
local time matches; cronsim matches the fields, and the stepping across offset changes is
our own (cronsim's misses fires next to 30- and 45-minute shifts).
"""

from __future__ import annotations

import bisect
import difflib
import enum
import functools
import hashlib
import re
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from cronsim import CronSim, CronSimError

NICKNAMES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
MAX_CRON_LENGTH = 200
MAX_JITTER_SECONDS = 86400
# The longest interval we accept: 10 years. Longer ones are almost certainly a unit mistake.
MAX_EVERY_SECONDS = 10 * 366 * 86400
# Datetimes beyond this cannot be stepped past safely (datetime.max is 9999-12-31).
LATEST_INSTANT = datetime(9000, 1, 1, tzinfo=UTC)
_PROBE_FROM = datetime(2000, 1, 1, tzinfo=UTC)
_ONE_VALUE_RANGE = re.compile(r"^(\w+)-\1/\d+$")
_DAY = timedelta(days=1)
_SECOND = timedelta(seconds=1)
_MICROSECOND = timedelta(microseconds=1)
# How far last_fire_at_or_before looks back, widening until a window holds a fire; each
# window is at most ~60 times the last, so stepping forward through it stays cheap.
_LOOKBACKS = [timedelta(seconds=s) for s in (120, 7200, 2 * 86400, 32 * 86400, 367 * 86400, 29 * 366 * 86400)]


class InvalidSchedule(ValueError):
    """A schedule that cannot be accepted; `field` names the offending input."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class MisfirePolicy(enum.StrEnum):
    RUN_ONCE = "run_once"  # coalesce missed fires into one run (the latest)
    RUN_ALL = "run_all"  # run every missed fire, up to a cap
    SKIP = "skip"  # run none of them


class SkipReason(enum.StrEnum):
    COALESCED = "coalesced"
    OUTSIDE_CATCHUP_WINDOW = "outside_catchup_window"
    MISFIRE_SKIP = "misfire_skip"
    RUN_ALL_CAP = "run_all_cap"


@dataclass(frozen=True)
class Schedule:
    """Exactly one of `cron`, `every` or `at` is set.

    An interval counts from `start_at` when given, else from `anchor` (fires at
    origin + k * every, k >= 0); `start_at`/`end_at` bound every kind of schedule (both
    inclusive).
    """

    cron: str = ""
    timezone: str = "UTC"
    every: int | None = None
    at: datetime | None = None
    anchor: datetime | None = None
    start_at: datetime | None = None
    end_at: datetime | None = None
    # Each fire of a repeating schedule moves later by a stable offset in [0, jitter)
    # seconds, drawn from (jitter_seed, the nominal fire time): many jobs on one expression
    # spread out instead of landing on one instant. See jitter_offset().
    jitter: int = 0
    jitter_seed: int = 0

    @property
    def kind(self) -> str:
        if self.cron:
            return "cron"
        if self.every is not None:
            return "interval"
        return "once"

    def describe(self) -> str:
        jitter = f" + jitter {self.jitter}s" if self.jitter else ""
        if self.cron:
            return f"cron {self.cron} ({self.timezone}){jitter}"
        if self.every is not None:
            return f"every {self.every}s{jitter}"
        return f"once at {self.at.isoformat() if self.at else '?'}"

    @property
    def nominal(self) -> Schedule:
        """The same schedule without jitter."""
        return replace(self, jitter=0, jitter_seed=0) if self.jitter else self


def normalize_cron(expression: str) -> str:
    """Return the 5-field form of `expression`, expanding nicknames; raise InvalidSchedule."""
    if not isinstance(expression, str):
        raise InvalidSchedule("cron", "must be a string")
    text = " ".join(expression.split())
    if not text:
        raise InvalidSchedule("cron", "must not be empty")
    if len(text) > MAX_CRON_LENGTH:
        raise InvalidSchedule("cron", f"must be at most {MAX_CRON_LENGTH} characters")
    if not text.isascii() or not text.isprintable():
        raise InvalidSchedule("cron", "must contain only printable ASCII characters")
    if text.startswith("@"):
        try:
            return NICKNAMES[text.lower()]
        except KeyError:
            names = ", ".join(sorted(NICKNAMES))
            raise InvalidSchedule("cron", f"unknown nickname {text!r} (known: {names})") from None
    fields = text.split(" ")
    if "=" in fields[0]:
        raise InvalidSchedule("cron", f"{fields[0]!r}: give the time zone in the timezone field, not in the expression")
    if len(fields) == 5:
        # cronsim 2.8 reads a one-value range with a step ("9-9/2") as "9/2" (9, 11, ...);
        # it means just 9.
        fields = [",".join(_ONE_VALUE_RANGE.sub(r"\1", part) for part in f.split(",")) for f in fields]
        text = " ".join(fields)
    if len(fields) != 5:
        raise InvalidSchedule(
            "cron", f"must have 5 fields (minute hour day-of-month month day-of-week), got {len(fields)}"
        )
    try:
        next(CronSim(text, _PROBE_FROM))
    except CronSimError as exc:
        # cronsim rejects day/month combinations that never exist ("0 0 31 2 *") here.
        raise InvalidSchedule("cron", f"{exc} in {text!r}") from None
    except StopIteration:
        raise InvalidSchedule("cron", f"{text!r} never fires") from None
    return text


def zone(name: str) -> ZoneInfo:
    """Return the IANA zone `name`; raise InvalidSchedule(field="timezone").

    Only the exact names of the tz database count. ZoneInfo opens more, by file name: on a
    case-insensitive disk "europe/berlin", and everywhere `localtime` (this machine's zone),
    `posixrules`, `Factory` and the `posix/` and `right/` copies of every zone (`right/`
    counts leap seconds, so runs 27 s off UTC).
    """
    if not isinstance(name, str) or name not in _zone_names():
        raise InvalidSchedule("timezone", _unknown_zone(name))
    return ZoneInfo(name)


_NOT_ZONES = {"localtime", "posixrules", "Factory"}


@functools.cache
def _zone_names() -> frozenset[str]:
    return frozenset(
        name for name in available_timezones() if name not in _NOT_ZONES and not name.startswith(("posix/", "right/"))
    )


@functools.cache
def _zone_names_by_folded() -> dict[str, str]:
    return {name.casefold(): name for name in _zone_names()}


def _unknown_zone(name: object) -> str:
    """The message for a zone name that is not one, with the name most likely meant."""
    if not isinstance(name, str) or not name.strip():
        return f"{name!r} is not an IANA time zone name"
    folded, names = name.strip().casefold(), _zone_names_by_folded()
    # The same name in another case or with spaces around it, else the closest spelling
    # (difflib's ratio: "Europe/Berlim" scores 0.92; "Mars/Olympus" nothing over 0.6).
    guess = [folded] if folded in names else difflib.get_close_matches(folded[:64], names, n=1, cutoff=0.8)
    hint = f"; did you mean {names[guess[0]]}?" if guess else ""
    return f"unknown time zone {name!r}{hint}"


def _tz(name: str) -> ZoneInfo:
    """The zone of a saved schedule, for arithmetic. Its name was checked when it was saved,
    less strictly before zone() took only exact names; the beat keeps computing those."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        # OSError: names of tzdata folders ("America") or over-long names reach the filesystem.
        raise InvalidSchedule("timezone", f"unknown time zone {name!r}") from None


def _aware(field_name: str, value: datetime | None) -> None:
    if value is not None and (value.tzinfo is None or value.utcoffset() is None):
        raise InvalidSchedule(field_name, "must include a UTC offset or time zone")


def validate(schedule: Schedule) -> Schedule:
    """Check `schedule` and return it with its cron expression normalised.

    Raises InvalidSchedule naming the field at fault.
    """
    kinds = [bool(schedule.cron), schedule.every is not None, schedule.at is not None]
    if sum(kinds) != 1:
        raise InvalidSchedule("schedule", "give exactly one of cron, every or at")
    for name in ("at", "anchor", "start_at", "end_at"):
        _aware(name, getattr(schedule, name))
    zone(schedule.timezone)
    cron = schedule.cron
    if cron:
        cron = normalize_cron(cron)
    if schedule.every is not None:
        every = schedule.every
        if isinstance(every, bool) or not isinstance(every, int):
            raise InvalidSchedule("every", "must be a whole number of seconds")
        if not 1 <= every <= MAX_EVERY_SECONDS:
            raise InvalidSchedule("every", f"must be between 1 and {MAX_EVERY_SECONDS} seconds")
        if schedule.anchor is None and schedule.start_at is None:
            raise InvalidSchedule("anchor", "an interval needs an anchor or a start time")
    for name in ("at", "start_at", "end_at"):
        value = getattr(schedule, name)
        if value is not None and value >= LATEST_INSTANT:
            raise InvalidSchedule(name, f"must be before {LATEST_INSTANT.year}")
    if schedule.start_at and schedule.end_at and schedule.end_at < schedule.start_at:
        raise InvalidSchedule("end_at", "must not be before start_at")
    jitter = schedule.jitter
    if isinstance(jitter, bool) or not isinstance(jitter, int) or not 0 <= jitter <= MAX_JITTER_SECONDS:
        raise InvalidSchedule("jitter", f"must be a whole number of seconds from 0 to {MAX_JITTER_SECONDS}")
    if jitter and schedule.at is not None:
        raise InvalidSchedule("jitter", "applies to repeating schedules (cron or every), not to a one-off")
    normalised = Schedule(
        cron=cron,
        timezone=schedule.timezone,
        every=schedule.every,
        at=schedule.at,
        anchor=schedule.anchor,
        start_at=schedule.start_at,
        end_at=schedule.end_at,
        jitter=jitter,
        jitter_seed=schedule.jitter_seed,
    )
    if normalised.cron and next_fire_after(normalised, normalised.start_at or _PROBE_FROM) is None:
        if normalised.end_at is None:
            raise InvalidSchedule("cron", f"{cron!r} never fires")
    if jitter:
        _check_jitter(normalised)
    return normalised


def _check_jitter(schedule: Schedule) -> None:
    """Refuse a jitter longer than the shortest gap between two fires, DST changes included."""
    nominal, probe = schedule.nominal, schedule.start_at or _PROBE_FROM
    gap, where = shortest_gap(nominal, probe), ""
    if gap is not None and (near_change := shortest_gap_at_offset_changes(nominal, probe, under=gap)) is not None:
        gap, where = near_change, " next to a DST change"
    if gap is not None and schedule.jitter > gap:
        raise InvalidSchedule("jitter", f"must not exceed the shortest gap between two fires ({gap:g} s{where}), "
                                        "or fires would overtake each other")


# How many upcoming fires of a cron schedule are looked at to find its shortest gap.
GAP_PROBE_FIRES = 200


def shortest_gap(schedule: Schedule, after: datetime) -> float | None:
    """The shortest time in seconds between two fires: exact for an interval; for cron the
    least gap among the next GAP_PROBE_FIRES fires (a cron pattern repeats within a day at
    minute resolution; day and month restrictions only lengthen gaps). None for a one-off."""
    if schedule.every is not None:
        return float(schedule.every)
    if not schedule.cron:
        return None
    fires = preview(schedule, after, GAP_PROBE_FIRES)
    return min(((b - a).total_seconds() for a, b in zip(fires, fires[1:])), default=None)


# How many years of a zone's offset changes shortest_gap_at_offset_changes looks at. Zones
# change their rules (Casablanca has had DST only since 2008; Sydney moved its dates that
# year), so one year from the probe's start (2000) is not enough; forty reach well past today
# and into the rule that repeats every year after tzdata's last listed change.
GAP_CHECK_YEARS = 40


def shortest_gap_at_offset_changes(schedule: Schedule, after: datetime, *, under: float) -> float | None:
    """The shortest time in seconds, if under `under`, between two cron fires next to a
    change of the zone's UTC offset in the GAP_CHECK_YEARS years from `after`; else None.

    A change can bring fires closer than the expression's pattern does: "30 2,3 * * *" in
    Australia/Sydney fires at 03:00 (02:30 does not exist) and 03:30 on the spring-forward
    day, 30 minutes apart instead of 60. Two fires closer than `under` with the change
    between them or the first at it both lie within `under` of the change, so only those
    fires are looked at.
    """
    if not schedule.cron:
        return None
    window = timedelta(seconds=under)
    until = min(after + GAP_CHECK_YEARS * 365 * _DAY, schedule.end_at or LATEST_INSTANT, LATEST_INSTANT)
    gaps = []
    change: datetime | None = after
    while (change := _first_offset_change(schedule.timezone, change, until)) is not None:
        fires, cursor = [], change - window
        while (cursor := next_fire_after(schedule, cursor)) is not None and cursor < change + window:
            fires.append(cursor)
        gaps += [(b - a).total_seconds() for a, b in zip(fires, fires[1:])]
    return min((gap for gap in gaps if gap < under), default=None)


def jitter_offset(schedule: Schedule, nominal: datetime) -> timedelta:
    """The stable delay of the fire due at `nominal`: whole seconds in [0, jitter)."""
    if not schedule.jitter:
        return timedelta(0)
    key = f"{schedule.jitter_seed}:{nominal.astimezone(UTC).isoformat()}".encode()
    draw = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big")
    return timedelta(seconds=draw % schedule.jitter)


def _interval_anchor(schedule: Schedule) -> datetime:
    anchor = schedule.start_at or schedule.anchor
    assert anchor is not None
    return anchor.astimezone(UTC).replace(microsecond=0)


def _next_fixed_time_fire(cron: str, zone_name: str, after: datetime) -> datetime | None:
    """The first fire strictly after `after` of a fixed-time job (see _is_fixed_time).

    cronsim walks the job's wall clock, so "0 9 * * *" means 09:00 local on both sides of a
    DST change; a wall time skipped by a gap fires right after it, and one in a repeated
    hour fires in its first pass only.
    """
    local = after.astimezone(_tz(zone_name))
    if local.fold and local.replace(fold=0).utcoffset() != local.utcoffset():
        # `after` is in the second pass of a repeated hour. cronsim reads every wall time of
        # that hour as its first pass, which is behind us (the job fired there once), so it
        # would answer with up to 60 past fires per hour of overlap. Look from the end of the
        # repeated hour instead: one step past all of it, however many fires it holds.
        local = _end_of_second_pass(zone_name, after) - _SECOND
    found = next(CronSim(cron, local), None)
    return None if found is None else found.astimezone(UTC)


def _next_wildcard_fire(cron: str, zone_name: str, after: datetime) -> datetime | None:
    """The first fire strictly after `after` of a job that is not fixed-time (hourly or finer).

    Such a job fires at every real instant whose wall time matches (Debian cron). Between
    two changes of the zone's UTC offset the wall clock is UTC plus a constant, so each such
    stretch is searched as plain wall time, moving on to the next stretch when the answer
    lies past its end. (cronsim's own stepping in the zone measures its jumps on the wall
    clock but makes them in UTC, and misses fires where the offset changes by 30 or 45
    minutes: Australia/Lord_Howe, Pacific/Chatham.)
    """
    cursor = after
    while True:
        offset = (cursor + _MICROSECOND).astimezone(_tz(zone_name)).utcoffset()
        wall = next(CronSim(cron, (cursor + offset).replace(tzinfo=None)), None)
        if wall is None:
            return None
        found = (wall - offset).replace(tzinfo=UTC)
        change = _first_offset_change(zone_name, cursor + _MICROSECOND, found)
        if change is None:
            return found
        # Each turn starts at a later offset change, so the loop ends at the first fire
        # (or when cronsim finds none within 50 years of its start).
        cursor = change - _MICROSECOND


def _is_fixed_time(cron: str) -> bool:
    """Whether Debian cron treats the job as fixed-time: no `*` starts its minute or hour field."""
    minute, hour = cron.split()[:2]
    return not (minute.startswith("*") or hour.startswith("*"))


def _end_of_second_pass(zone_name: str, after: datetime) -> datetime:
    """The wall time (in the zone) at which the repeated hour holding `after` ends."""
    tz = _tz(zone_name)
    local = after.astimezone(tz)
    earlier = local.replace(fold=0).utcoffset()
    # The clocks went back at most `earlier - local.utcoffset()` ago.
    change = _first_offset_change(zone_name, after - (earlier - local.utcoffset()), after)
    assert change is not None
    return (change + earlier).replace(tzinfo=tz)


@functools.lru_cache(maxsize=4096)
def _offset_changes_in(zone_name: str, year: int) -> tuple[datetime, ...]:
    """The instants at which the zone's UTC offset changes, from (exclusive) 1 January of
    `year` to (inclusive) 1 January of the next, 00:00 UTC, in order."""
    # zoneinfo does not list a zone's offset changes: compare offsets a day apart and bisect
    # to the second where they differ (no zone changes its offset twice within a day).
    tz = _tz(zone_name)
    start = datetime(year, 1, 1, tzinfo=UTC)
    days = (datetime(year + 1, 1, 1, tzinfo=UTC) - start).days
    samples = [start + k * _DAY for k in range(days + 1)]
    offsets = [moment.astimezone(tz).utcoffset() for moment in samples]
    changes = []
    for low, high, old, new in zip(samples, samples[1:], offsets, offsets[1:]):
        if old == new:
            continue
        while high - low > _SECOND:  # keep: offset(low) == old != offset(high)
            middle = low + (high - low) // 2 // _SECOND * _SECOND
            if middle.astimezone(tz).utcoffset() == old:
                low = middle
            else:
                high = middle
        changes.append(high)
    return tuple(changes)


def _first_offset_change(zone_name: str, after: datetime, until: datetime) -> datetime | None:
    """The first instant in (after, until] at which the zone's UTC offset changes, or None."""
    for year in range(after.year, until.year + 1):
        changes = _offset_changes_in(zone_name, year)
        index = bisect.bisect_right(changes, after)
        if index < len(changes):
            return changes[index] if changes[index] <= until else None
    return None


def _raw_next_after(schedule: Schedule, after: datetime) -> datetime | None:
    """The first fire strictly after `after`, ignoring the start/end window."""
    if schedule.cron:
        try:
            if _is_fixed_time(schedule.cron):
                return _next_fixed_time_fire(schedule.cron, schedule.timezone, after)
            return _next_wildcard_fire(schedule.cron, schedule.timezone, after)
        except (OverflowError, ValueError):
            return None
    if schedule.every is not None:
        anchor = _interval_anchor(schedule)
        if after < anchor:
            return anchor
        every = timedelta(seconds=schedule.every)
        return anchor + ((after - anchor) // every + 1) * every
    assert schedule.at is not None
    return schedule.at.astimezone(UTC) if schedule.at > after else None


def _raw_last_at_or_before(schedule: Schedule, at: datetime) -> datetime | None:
    """The latest fire at or before `at`, ignoring the start/end window."""
    if schedule.cron:
        # Not cronsim's reverse iteration: it misses fires in repeated or shortened DST hours
        # and can loop forever in some zones (Pacific/Chatham). Step forward through widening
        # windows instead, with the same rules next_fire_after uses.
        for lookback in _LOOKBACKS:
            cursor, last = at - lookback, None
            while (found := _raw_next_after(schedule, cursor)) is not None and found <= at:
                last = cursor = found
            if last is not None:
                return last
        return None
    if schedule.every is not None:
        anchor = _interval_anchor(schedule)
        if at < anchor:
            return None
        every = timedelta(seconds=schedule.every)
        return anchor + ((at - anchor) // every) * every
    assert schedule.at is not None
    return schedule.at.astimezone(UTC) if schedule.at <= at else None


def next_fire_after(schedule: Schedule, after: datetime) -> datetime | None:
    """Return the first fire time strictly after `after`, or None when nothing is left.

    With jitter, fires are nominal times plus their offsets. Offsets are shorter than the
    gap between fires (validate), so fires keep their order: the first nominal time whose
    jittered fire is past `after` gives the answer, and it lies after `after` - jitter.
    """
    if not schedule.jitter:
        return _next_nominal_after(schedule, after)
    nominal = schedule.nominal
    cursor = after - timedelta(seconds=schedule.jitter)
    while (found := _next_nominal_after(nominal, cursor)) is not None:
        fire = found + jitter_offset(schedule, found)
        if fire > after:
            return fire
        cursor = found
    return None


def _next_nominal_after(schedule: Schedule, after: datetime) -> datetime | None:
    if schedule.start_at is not None and after < schedule.start_at:
        # A fire exactly at start_at counts, so look from just before it.
        after = schedule.start_at - timedelta(microseconds=1)
    if after >= LATEST_INSTANT:
        return None
    found = _raw_next_after(schedule, after)
    if found is None or (schedule.end_at is not None and found > schedule.end_at):
        return None
    if found >= LATEST_INSTANT:
        return None
    return found


def last_fire_at_or_before(schedule: Schedule, at: datetime) -> datetime | None:
    """Return the latest fire time at or before `at`, or None.

    With jitter: the latest nominal time at or before `at` whose jittered fire is too;
    the one before it always is (offsets are shorter than gaps), so at most two steps.
    """
    if not schedule.jitter:
        return _last_nominal_at_or_before(schedule, at)
    nominal = schedule.nominal
    found = _last_nominal_at_or_before(nominal, at)
    while found is not None:
        fire = found + jitter_offset(schedule, found)
        if fire <= at:
            return fire
        found = _last_nominal_at_or_before(nominal, found - timedelta(microseconds=1))
    return None


def _last_nominal_at_or_before(schedule: Schedule, at: datetime) -> datetime | None:
    if schedule.end_at is not None and at > schedule.end_at:
        at = schedule.end_at
    found = _raw_last_at_or_before(schedule, at)
    if found is None or (schedule.start_at is not None and found < schedule.start_at):
        return None
    return found


def preview(schedule: Schedule, after: datetime, count: int) -> list[datetime]:
    """The next `count` fire times strictly after `after` (fewer when the schedule ends)."""
    fires: list[datetime] = []
    current = after
    while len(fires) < count:
        nxt = next_fire_after(schedule, current)
        if nxt is None:
            break
        fires.append(nxt)
        current = nxt
    return fires


def fire_anomaly(schedule: Schedule, fire: datetime) -> str | None:
    """Why a cron fire lands where a reader of the expression would not expect it, or None.

    A wall time skipped by a spring-forward gap fires right after the gap; a wall time in a
    repeated autumn hour is ambiguous (a fixed-time job fires once, finer jobs at both).
    Interval and one-off schedules count real seconds, so they have no anomalies.
    """
    if not schedule.cron:
        return None
    if schedule.jitter:  # judge the nominal time the jitter moved
        fire = _last_nominal_at_or_before(schedule.nominal, fire) or fire
    local = fire.astimezone(_tz(schedule.timezone))
    wall = local.replace(tzinfo=None)
    nominal = next(CronSim(schedule.cron, wall - timedelta(seconds=1)), None)
    if nominal != wall:
        return (f"dst_gap: the expression's local time falls in a DST gap that day; "
                f"fires at {wall:%H:%M}, right after the gap")
    if local.replace(fold=1 - local.fold).utcoffset() != local.utcoffset():
        return f"dst_repeated: {wall:%H:%M} occurs twice that day (clocks go back); this is the {('first', 'second')[local.fold]}"
    return None


@dataclass
class Plan:
    """What to record for one due job: runs to create, fires to record as skipped, and
    the job's next fire time (None: nothing left to fire)."""

    fires: list[datetime] = field(default_factory=list)
    skipped: list[tuple[datetime, str]] = field(default_factory=list)
    next_run_at: datetime | None = None


@dataclass(frozen=True)
class MisfireRules:
    policy: MisfirePolicy = MisfirePolicy.RUN_ONCE
    grace: timedelta = timedelta(seconds=60)  # later than this, a fire is "missed"
    catchup_window: timedelta = timedelta(days=1)  # missed fires older than this never run
    run_all_cap: int = 100  # run_all runs at most this many missed fires
    limit: int = 1000  # fire times planned per call; the rest wait for the next call


def plan_fires(
    schedule: Schedule,
    due_at: datetime,
    now: datetime,
    rules: MisfireRules,
    *,
    cache: NextFireCache | None = None,
) -> Plan:
    """Decide what to do with a job whose next fire time `due_at` has passed.

    Fires at most `rules.grace` late are on time and always run. Older ones were missed
    (the beat was down or behind) and follow the misfire policy; missed fires older than
    the catch-up window are skipped in one record (at the first of them) whose reason says
    how far the gap reached, so a long outage costs one row, not one per fire.

    At most `rules.limit` fire times are planned per call. When more are due, next_run_at
    stays in the past and the job is claimed again on the next turn.
    """
    step = cache.next_fire_after if cache is not None else next_fire_after
    plan = Plan()
    # The catch-up window never reaches into the grace: an on-time fire always runs.
    window_start = min(now - rules.catchup_window, now - rules.grace)
    cursor: datetime | None = due_at
    if due_at < window_start:
        last_outside = last_fire_at_or_before(schedule, window_start - timedelta(microseconds=1))
        note = f"{SkipReason.OUTSIDE_CATCHUP_WINDOW}: missed fires up to {last_outside.isoformat()}"
        plan.skipped.append((due_at, note))
        cursor = next_fire_after(schedule, last_outside) if last_outside else due_at

    on_time_from = now - rules.grace
    latest_missed = run_all_from = None
    if cursor is not None and cursor < on_time_from:  # only a late job pays for this
        latest_missed = last_fire_at_or_before(schedule, on_time_from - timedelta(microseconds=1))
    if rules.policy is MisfirePolicy.RUN_ALL and latest_missed is not None:
        run_all_from = _nth_fire_back(schedule, latest_missed, rules.run_all_cap)

    planned = len(plan.skipped)
    while cursor is not None and cursor <= now and planned < rules.limit:
        if cursor >= on_time_from:
            plan.fires.append(cursor)
        elif rules.policy is MisfirePolicy.SKIP:
            plan.skipped.append((cursor, SkipReason.MISFIRE_SKIP.value))
        elif rules.policy is MisfirePolicy.RUN_ONCE:
            if cursor == latest_missed and not _has_fire_between(schedule, cursor, now):
                plan.fires.append(cursor)
            else:
                plan.skipped.append((cursor, SkipReason.COALESCED.value))
        elif run_all_from is not None and cursor >= run_all_from:
            plan.fires.append(cursor)
        else:
            plan.skipped.append((cursor, SkipReason.RUN_ALL_CAP.value))
        planned += 1
        cursor = step(schedule, cursor)
    plan.next_run_at = cursor
    return plan


def _has_fire_between(schedule: Schedule, after: datetime, until: datetime) -> bool:
    nxt = next_fire_after(schedule, after)
    return nxt is not None and nxt <= until


def _nth_fire_back(schedule: Schedule, latest: datetime, n: int) -> datetime:
    """The earliest of the `n` fires ending at `latest` (inclusive)."""
    current = latest
    for _ in range(max(n, 1) - 1):
        previous = last_fire_at_or_before(schedule, current - timedelta(microseconds=1))
        if previous is None:
            break
        current = previous
    return current


class NextFireCache:
    """Memoises next_fire_after for one batch.

    A million tenants' midnight jobs share a handful of (expression, zone, instant)
    triples; computing each once per batch keeps planning cheap.
    """

    def __init__(self) -> None:
        self._memo: dict[tuple[Schedule, datetime], datetime | None] = {}

    def next_fire_after(self, schedule: Schedule, after: datetime) -> datetime | None:
        key = (schedule, after)
        try:
            return self._memo[key]
        except KeyError:
            value = self._memo[key] = next_fire_after(schedule, after)
            return value
