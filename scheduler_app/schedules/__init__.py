"""Schedule arithmetic. No database, no clock, no Django.

Every function takes the instants it reasons about as arguments. Datetimes in and out are
timezone-aware and in UTC; the job's own zone is used only inside the calculation.

Cron expressions are evaluated in the job's IANA zone with Debian cron's DST rules. A
fixed-time job (no `*` starting its minute or hour field) follows the wall clock, as cronsim
walks it: a local time skipped by spring-forward fires right after the gap, one in the
repeated autumn hour fires once. An hourly or finer job fires at every real instant whose
local time matches; cronsim matches the fields, and the stepping across offset changes is
our own (cronsim's misses fires next to 30- and 45-minute shifts).

The package: base.py (Schedule, the misfire policies, cron normalised), zones.py (IANA
zones and their offset changes), fires.py (the next and last fires, jitter, previews, DST
flags), calendars.py (business days; fires skipped or moved by a calendar), checks.py (a
schedule validated, its shortest gap), misfires.py (the fires a beat records for a due job
under its misfire policy), placement.py (flexible windows: the load per minute of a window,
its least loaded minute), impact.py (the fires a job holds checked against the zone and holiday
data installed now), pauses.py (a pause's end: checked, due; a bulk pause's fingerprint).
"""

from scheduler_app.schedules.base import (
    LATEST_INSTANT,
    MAX_CRON_LENGTH,
    MAX_EVERY_SECONDS,
    MAX_JITTER_SECONDS,
    NICKNAMES,
    InvalidSchedule,
    MisfirePolicy,
    Schedule,
    SkipReason,
    every_text,
    normalize_cron,
)
from scheduler_app.schedules.calendars import (
    BusinessCalendar,
    CalendarPolicy,
    shift_fire,
)
from scheduler_app.schedules.checks import (
    GAP_CHECK_YEARS,
    GAP_PROBE_FIRES,
    shortest_gap,
    shortest_gap_at_offset_changes,
    validate,
)
from scheduler_app.schedules.fires import (
    calendar_note,
    fire_anomaly,
    jitter_offset,
    last_fire_at_or_before,
    next_fire_after,
    preview,
)
from scheduler_app.schedules.impact import (
    Cause,
    Change,
    ChangeKind,
    compare,
)
from scheduler_app.schedules.misfires import (
    MisfireRules,
    NextFireCache,
    Plan,
    plan_fires,
)
from scheduler_app.schedules.pauses import (
    DEFAULT_EXPIRY,
    EXPIRIES,
    MAX_PAUSE,
    expiry_due,
    pause_problem,
    set_fingerprint,
)
from scheduler_app.schedules.placement import (
    Neighbours,
    Window,
    choose_minute,
    load_profile,
    load_text,
    parse_window,
)
from scheduler_app.schedules.zones import (
    zone,
)

__all__ = [
    "DEFAULT_EXPIRY",
    "EXPIRIES",
    "MAX_PAUSE",
    "expiry_due",
    "pause_problem",
    "set_fingerprint",
    "BusinessCalendar",
    "CalendarPolicy",
    "Cause",
    "Change",
    "ChangeKind",
    "compare",
    "calendar_note",
    "shift_fire",
    "GAP_CHECK_YEARS",
    "GAP_PROBE_FIRES",
    "InvalidSchedule",
    "LATEST_INSTANT",
    "MAX_CRON_LENGTH",
    "MAX_EVERY_SECONDS",
    "MAX_JITTER_SECONDS",
    "MisfirePolicy",
    "MisfireRules",
    "NICKNAMES",
    "Neighbours",
    "Window",
    "choose_minute",
    "load_profile",
    "load_text",
    "parse_window",
    "NextFireCache",
    "Plan",
    "Schedule",
    "SkipReason",
    "every_text",
    "fire_anomaly",
    "jitter_offset",
    "last_fire_at_or_before",
    "next_fire_after",
    "normalize_cron",
    "plan_fires",
    "preview",
    "shortest_gap",
    "shortest_gap_at_offset_changes",
    "validate",
    "zone",
]
