"""IANA zones by exact name (with "did you mean"), and the instants their offsets change."""

from __future__ import annotations

import bisect
import difflib
import functools
from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from scheduler_app.schedules.base import DAY, SECOND, InvalidSchedule


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


def tzinfo_of(name: str) -> ZoneInfo:
    """The zone of a saved schedule, for arithmetic. Its name was checked when it was saved,
    less strictly before zone() took only exact names; the beat keeps computing those."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        # OSError: names of tzdata folders ("America") or over-long names reach the filesystem.
        raise InvalidSchedule("timezone", f"unknown time zone {name!r}") from None


def end_of_second_pass(zone_name: str, after: datetime) -> datetime:
    """The wall time (in the zone) at which the repeated hour holding `after` ends."""
    tz = tzinfo_of(zone_name)
    local = after.astimezone(tz)
    earlier, offset = local.replace(fold=0).utcoffset(), local.utcoffset()
    assert earlier is not None and offset is not None  # local is aware, in a ZoneInfo
    # The clocks went back at most `earlier - offset` ago.
    change = first_offset_change(zone_name, after - (earlier - offset), after)
    assert change is not None
    return (change + earlier).replace(tzinfo=tz)


@functools.lru_cache(maxsize=4096)
def _offset_changes_in(zone_name: str, year: int) -> tuple[datetime, ...]:
    """The instants at which the zone's UTC offset changes, from (exclusive) 1 January of
    `year` to (inclusive) 1 January of the next, 00:00 UTC, in order."""
    # zoneinfo does not list a zone's offset changes: compare offsets a day apart and bisect
    # to the second where they differ (no zone changes its offset twice within a day).
    tz = tzinfo_of(zone_name)
    start = datetime(year, 1, 1, tzinfo=UTC)
    days = (datetime(year + 1, 1, 1, tzinfo=UTC) - start).days
    samples = [start + k * DAY for k in range(days + 1)]
    offsets = [moment.astimezone(tz).utcoffset() for moment in samples]
    changes = []
    for low, high, old, new in zip(samples, samples[1:], offsets, offsets[1:]):
        if old == new:
            continue
        while high - low > SECOND:  # keep: offset(low) == old != offset(high)
            middle = low + (high - low) // 2 // SECOND * SECOND
            if middle.astimezone(tz).utcoffset() == old:
                low = middle
            else:
                high = middle
        changes.append(high)
    return tuple(changes)


def first_offset_change(zone_name: str, after: datetime, until: datetime) -> datetime | None:
    """The first instant in (after, until] at which the zone's UTC offset changes, or None."""
    for year in range(after.year, until.year + 1):
        changes = _offset_changes_in(zone_name, year)
        index = bisect.bisect_right(changes, after)
        if index < len(changes):
            return changes[index] if changes[index] <= until else None
    return None
