"""New time data for tests: a zone compiled with zic from a tzdata source line (or, where a
test may start no process, the same bytes written here: fixed_zone_tzif), put ahead of
the installed ones (in this process by zoneinfo.reset_tzpath, in a process it starts by
PYTHONTZPATH), and a holidays release with one more holiday (in this process by patching
the country's class, in a process it starts by a copy of the package on PYTHONPATH whose
country module adds the day).

zoneinfo reads the first directory of its search path that holds the zone (here the system's
/usr/share/zoneinfo) and the tzdata package only when none does: a compiled zone in a
directory put first wins over both.
"""

from __future__ import annotations

import contextlib
import shutil
import struct
import subprocess
import zoneinfo
from collections.abc import Iterator
from datetime import date
from pathlib import Path

import holidays

from scheduler_app.models import calendars as calendar_models
from scheduler_app.schedules import zones

# Asia/Tbilisi is UTC+04:00 without DST in every tzdata release since 2005; this one says +03.
TBILISI_AT_PLUS_3 = "Zone\tAsia/Tbilisi\t3:00\t-\t+03\n"

# The country whose release gains a holiday, and the name the day gets.
COUNTRY = "GE"
NEW_HOLIDAY = "Cronfleet Day"


def compile_zone(directory: Path, source: str = TBILISI_AT_PLUS_3) -> Path:
    """Compile `source` (tzdata's zic format) into `directory`/zoneinfo; return that."""
    out = directory / "zoneinfo"
    text = directory / "zone.src"
    text.write_text(source)
    subprocess.run(["zic", "-d", str(out), str(text)], check=True, capture_output=True, timeout=60)
    return out


def fixed_zone_tzif(seconds: int, abbreviation: str) -> bytes:
    """The TZif file (RFC 8536, version 2) of a zone at a fixed UTC offset, byte for byte what
    zic makes of `Zone NAME <offset> - <abbreviation>` (tests/system/schedules checks it)."""
    chars = abbreviation.encode() + b"\0"
    header = b"TZif2" + bytes(15) + struct.pack(">6l", 0, 0, 0, 0, 1, len(chars))
    block = header + struct.pack(">lBB", seconds, 0, 0) + chars
    hours = -seconds // 3600  # POSIX TZ strings count west of Greenwich
    return block + block + f"\n<{abbreviation}>{hours}\n".encode()


def write_zone(directory: Path, name: str = "Asia/Tbilisi", seconds: int = 3 * 3600, abbreviation: str = "+03") -> Path:
    """The zone `name` at a fixed offset written under `directory`/zoneinfo; return that."""
    out = directory / "zoneinfo"
    (out / name).parent.mkdir(parents=True, exist_ok=True)
    (out / name).write_bytes(fixed_zone_tzif(seconds, abbreviation))
    return out


def tzpath_with(compiled: Path) -> str:
    """PYTHONTZPATH for a process that should read `compiled` first, then what this one reads."""
    return ":".join([str(compiled), *zoneinfo.TZPATH])


def forget_zones() -> None:
    """Drop what this process cached of zones, so the next reads take the path as it is now."""
    zoneinfo.ZoneInfo.clear_cache()
    for cached in (zones._offset_changes_in, zones._zone_names, zones._zone_names_by_folded):
        cached.cache_clear()


@contextlib.contextmanager
def zones_from(compiled: Path) -> Iterator[None]:
    """In this process: zones read from `compiled` first, as a new tzdata release would be."""
    before = zoneinfo.TZPATH
    zoneinfo.reset_tzpath(to=[str(compiled), *before])
    forget_zones()
    try:
        yield
    finally:
        zoneinfo.reset_tzpath(to=list(before))
        forget_zones()


def country_class():
    return type(holidays.country_holidays(COUNTRY))


@contextlib.contextmanager
def holiday_added(day: date) -> Iterator[None]:
    """In this process: the country's holidays gain `day` (NEW_HOLIDAY), as a new release of
    the holidays package would; calendars built before are forgotten."""
    cls = country_class()
    original = cls._populate_public_holidays

    def populate(self):
        original(self)
        if self._year == day.year:
            self._add_holiday(NEW_HOLIDAY, day)

    cls._populate_public_holidays = populate
    calendar_models.business_calendar_of.cache_clear()
    try:
        yield
    finally:
        cls._populate_public_holidays = original
        calendar_models.business_calendar_of.cache_clear()


def holidays_release(directory: Path, day: date) -> Path:
    """A copy of the installed holidays package whose country module adds `day`; return the
    directory to put first on PYTHONPATH."""
    source = Path(holidays.__file__).parent
    root = directory / "holidays-release"
    shutil.copytree(source, root / "holidays", ignore=shutil.ignore_patterns("__pycache__"))
    module = root / "holidays" / "countries" / (country_class().__module__.rsplit(".", 1)[-1] + ".py")
    text = module.read_text()
    hook = "    def _populate_public_holidays(self):\n"
    assert text.count(hook) == 1, f"{module.name}: no single {hook.strip()!r} to add the day to"
    added = (
        f"        if self._year == {day.year}:\n"
        f"            self._add_holiday({NEW_HOLIDAY!r}, ({day.month}, {day.day}))\n"
    )
    module.write_text(text.replace(hook, hook + added))
    return root
