"""Retention's policy: what a tenant's or a job's retention fields mean, where each value in
force comes from (job, tenant, settings), and checking new values with errors that name the
field (services/retention.py sets them).
The pruning that enforces it is scheduler_app/ledger/retention.py (which re-exports these names).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from scheduler_app.conf import app_settings
from scheduler_app.models import Job, Tenant
from scheduler_app.validation import InvalidInput

FIELDS = ("retention_days", "retention_failed_days", "retention_keep_last")
LIMITS = {"retention_days": 36500, "retention_failed_days": 36500, "retention_keep_last": 100_000}
SETTINGS = {
    "retention_days": "CRONFLEET_RETENTION_DAYS",
    "retention_failed_days": "CRONFLEET_RETENTION_FAILED_DAYS",
    "retention_keep_last": "CRONFLEET_RETENTION_KEEP_LAST",
}


# --- the policy ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Policy:
    days: int  # a finished run is kept this many days (0: forever)
    failed_days: int  # a failed or dead one at least this many (0: forever)
    keep_last: int  # a job's newest runs kept whatever their age (0: none)

    def kept_days(self, *, failed: bool) -> int | None:
        """Days after finishing that a run of this class is kept by age; None: forever.
        Failed and dead runs are never kept for less than the others."""
        if self.days == 0 or (failed and self.failed_days == 0):
            return None
        return max(self.days, self.failed_days) if failed else self.days


def resolve(*levels: tuple[str, Mapping]) -> tuple[Policy, dict[str, str]]:
    """The policy in force given (name, {field: value or None}) levels, the most specific
    first, with the settings last; and, for each field, the level it came from."""
    values, sources = {}, {}
    for name in FIELDS:
        for level, fields in levels:
            if fields.get(name) is not None:
                values[name], sources[name] = fields[name], level
                break
        else:
            values[name], sources[name] = getattr(app_settings, SETTINGS[name].removeprefix("CRONFLEET_")), "settings"
    return Policy(values["retention_days"], values["retention_failed_days"], values["retention_keep_last"]), sources


def own_fields(obj: Tenant | Job) -> dict[str, int | None]:
    return {name: getattr(obj, name) for name in FIELDS}


def describe(obj: Tenant | Job) -> dict:
    """What the API, the CLI and the admin show: the values set on `obj` (None: inherited)
    and the policy in force, with where each value comes from."""
    levels = (
        [("job", own_fields(obj)), ("tenant", own_fields(obj.tenant))]
        if isinstance(obj, Job)
        else [("tenant", own_fields(obj))]
    )
    policy, sources = resolve(*levels)
    return {
        **own_fields(obj),
        "effective": {
            "days": policy.days,
            "failed_days": policy.kept_days(failed=True) or 0,
            "keep_last": policy.keep_last,
            "sources": {name.removeprefix("retention_"): source for name, source in sources.items()},
        },
    }


def check_retention(obj: Tenant | Job, changes: Mapping) -> dict[str, int | None]:
    """Validate retention `changes` (field: whole number or None to inherit) for `obj`;
    return them. Raises InvalidInput naming the field."""
    values = {}
    for name, value in changes.items():
        if name not in FIELDS:
            raise InvalidInput(name, "is not a retention field")
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise InvalidInput(name, "must be a whole number")
        if value is not None and not 0 <= value <= LIMITS[name]:
            raise InvalidInput(name, f"must be between 0 and {LIMITS[name]}")
        values[name] = value
    after = {**own_fields(obj), **values}
    days, failed_days = after["retention_days"], after["retention_failed_days"]
    if days and failed_days and failed_days < days:
        if "retention_failed_days" in values:
            raise InvalidInput(
                "retention_failed_days",
                f"must be at least retention_days ({days}), or 0 to keep failed and dead runs forever",
            )
        raise InvalidInput(
            "retention_days",
            f"must be at most retention_failed_days ({failed_days}): failed and "
            "dead runs are kept at least as long as the others",
        )
    return values
