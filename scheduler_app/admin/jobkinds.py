"""The job form's kinds: what a job runs (task, HTTP, command, SQL, check-in) and how it is
scheduled (cron, interval, one-off, window, after another job), each with its own fields.

The form shows a selector for each; only the chosen kind's fields count (a value left in
another kind's field is ignored, and so is its error), and jobform.js hides the others (the
page works without it). The services still judge the whole job: refusals are collected by
validating again with each refused part set aside (collect_refusals), so a bad cron and a bad
zone are both reported at once, by the same validation the API uses.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any, Protocol, TypeVar

from django import forms

from scheduler_app import services
from scheduler_app.admin.common import jsonb_safe
from scheduler_app.conf import app_settings
from scheduler_app.models import Job, TargetKind
from scheduler_app.targets import monitor
from scheduler_app.targets.http import HTTP_METHODS

T = TypeVar("T")

TARGET_KINDS: dict[str, tuple[str, ...]] = {
    TargetKind.TASK: ("task_name", "args", "kwargs"),
    TargetKind.HTTP: ("http_method", "http_url", "http_headers", "http_body"),
    TargetKind.COMMAND: ("command_name", "command_params"),
    TargetKind.SQL: ("sql_name", "sql_params"),
    TargetKind.MONITOR: ("grace_seconds",),
}
TARGET_LABELS = {
    TargetKind.TASK: "Celery task",
    TargetKind.HTTP: "HTTP webhook",
    TargetKind.COMMAND: "Command (allow-listed program)",
    TargetKind.SQL: "SQL statement (allow-listed)",
    TargetKind.MONITOR: "Check-in (runs elsewhere and pings)",
}
_BOUNDS = ("start_at", "end_at")
_CALENDAR = ("calendar", "calendar_policy")
SCHEDULE_KINDS: dict[str, tuple[str, ...]] = {
    "cron": ("cron", *_BOUNDS, "jitter_seconds", *_CALENDAR),
    "every": ("every_seconds", *_BOUNDS, "jitter_seconds", *_CALENDAR),
    "at": ("run_at", *_CALENDAR),
    "window": ("flex_window", "flex_scope", *_BOUNDS, *_CALENDAR),
    "after": ("after_job", "after_states"),
}
SCHEDULE_LABELS = {
    "cron": "Cron expression",
    "every": "Interval (every N seconds)",
    "at": "Once, at an instant",
    "window": "Flexible window (placed at the quietest minute)",
    "after": "After another job's run ends (chain)",
}
KIND_FIELDS = {name for fields in (*TARGET_KINDS.values(), *SCHEDULE_KINDS.values()) for name in fields}

# JobSpec values of a schedule or a target that the chosen kind leaves out.
SCHEDULE_BLANKS: dict[str, Any] = {
    "cron": "",
    "every": None,
    "at": None,
    "flex_window": "",
    "flex_scope": "",
    "after_job": "",
    "after_states": None,
    "start_at": None,
    "end_at": None,
    "jitter_seconds": 0,
    "calendar": "",
    "calendar_policy": "skip",
}
TARGET_BLANKS: dict[str, Any] = {
    "target_kind": TargetKind.TASK.value,
    "task_name": "",
    "args": [],
    "kwargs": {},
    "http": None,
    "command": None,
    "sql": None,
    "monitor": None,
}
# A form field -> the JobSpec key (or group of keys: "target", "schedule") its value goes to.
FORM_TO_SPEC = {"every_seconds": "every", "run_at": "at"}
GROUP_OF = {
    **{name: "target" for fields in TARGET_KINDS.values() for name in fields},
    "target_kind": "target",
    **{name: "schedule" for name in ("schedule_kind", "cron", "every_seconds", "run_at", "flex_window")},
    **{name: "schedule" for name in ("flex_scope", "after_job", "after_states")},
}
# A service's refusal (the first part of InvalidInput.field) -> the group it refuses.
REFUSED_GROUP = {
    "target_kind": "target",
    "task": "target",
    "http": "target",
    "command": "target",
    "sql": "target",
    "monitor": "target",
    "grace_seconds": "target",
    "schedule": "schedule",
    "anchor": "schedule",
    "after_job": "schedule",
    "after_states": "schedule",
}

# The JobSpec values of how a job runs, beside what and when (its retries, misfires, overlap,
# priority and limits): the form's plain fields, each with the services' default.
POLICY_FIELDS = (
    "priority",
    "timeout_seconds",
    "max_attempts",
    "retry_backoff_seconds",
    "retry_backoff_max_seconds",
    "misfire_policy",
    "catchup_window_seconds",
    "run_all_cap",
    "overlap_policy",
    "batch",
    "pause_after_failures",
)


def names_choices(names, current: str = "") -> list:
    """An allow-list's names to choose from (and the job's own, when the list no longer has it)."""
    listed = sorted(str(name) for name in names)
    if current and current not in listed:
        listed.append(current)
    return [("", "---------"), *[(name, name) for name in listed]]


def kind_select(kinds: Mapping[str, tuple[str, ...]], labels: Mapping[str, str], help_text: str) -> forms.ChoiceField:
    # jobform.js reads which fields each kind shows from the selector itself.
    attrs = {"class": "cf-kind", "data-cf-kinds": json.dumps({str(kind): list(f) for kind, f in kinds.items()})}
    return forms.ChoiceField(
        choices=[(str(kind), labels[kind]) for kind in kinds],
        required=False,
        widget=forms.Select(attrs=attrs),
        help_text=help_text,
    )


class KindFields(forms.Form):
    """The kind selectors and the fields of the kinds that are not model fields."""

    target_kind = kind_select(
        TARGET_KINDS, TARGET_LABELS, "What Cronfleet runs at each fire; only this kind's fields count"
    )
    http_method = forms.ChoiceField(
        choices=[(m, m) for m in HTTP_METHODS], initial="POST", required=False, label="Method"
    )
    http_url = forms.CharField(required=False, max_length=2048, label="URL", widget=forms.TextInput({"size": 80}))
    http_headers = forms.JSONField(
        required=False, initial=dict, label="Headers", help_text='A JSON object, e.g. {"X-Env": "prod"}'
    )
    http_body = forms.CharField(required=False, strip=False, label="Body", widget=forms.Textarea({"rows": 3}))
    command_name = forms.ChoiceField(
        choices=(), required=False, label="Command", help_text="A program named in CRONFLEET_COMMANDS"
    )
    command_params = forms.JSONField(required=False, initial=dict, label="Parameters", help_text="A JSON object")
    sql_name = forms.ChoiceField(
        choices=(), required=False, label="Statement", help_text="A statement named in CRONFLEET_SQL"
    )
    sql_params = forms.JSONField(
        required=False,
        initial=dict,
        label="Parameters",
        help_text="A JSON object of the statement's declared parameters",
    )
    grace_seconds = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=monitor.MAX_GRACE_SECONDS,
        help_text=f"How long after each fire a ping may come; blank: {monitor.DEFAULT_GRACE_SECONDS}",
    )
    schedule_kind = kind_select(SCHEDULE_KINDS, SCHEDULE_LABELS, "When it fires; only this kind's fields count")

    def offer_kinds(self, job: Job | None) -> None:
        """Fill the allow-lists' choices and, for a saved job, each kind field's value."""
        config = dict(job.target_config or {}) if job is not None else {}
        kind = job.target_kind if job is not None else ""
        named = config.get("name", "")
        self.fields["command_name"].choices = names_choices(app_settings.COMMANDS, named if kind == "command" else "")
        self.fields["sql_name"].choices = names_choices(app_settings.SQL, named if kind == "sql" else "")
        if job is None:
            return
        self.initial["schedule_kind"] = schedule_kind_of(job)
        if kind == TargetKind.HTTP:
            self.initial.update({f"http_{key}": config.get(key) for key in ("method", "url", "headers", "body")})
        elif kind in (TargetKind.COMMAND, TargetKind.SQL):
            self.initial.update({f"{kind}_name": named, f"{kind}_params": config.get("params") or {}})
        elif kind == TargetKind.MONITOR:
            self.initial["grace_seconds"] = config.get("grace_seconds")

    def chosen_kinds(self) -> tuple[str, str]:
        """The target and schedule kinds chosen; a form posted without a selector (an older
        page) is read by the fields it fills."""
        data = self.cleaned_data
        target = data.get("target_kind") or TargetKind.TASK.value
        schedule = data.get("schedule_kind") or next(
            (kind for kind, field in INFERRED_SCHEDULE if self.filled(field)), "cron"
        )
        return target, schedule

    def filled(self, name: str) -> bool:
        """Whether the form was sent a value for `name` (valid or not)."""
        value = self[name].value() if name in self.fields else None
        return any(value) if isinstance(value, list | tuple) else value not in (None, "")

    def ignore_other_kinds(self, target: str, schedule: str) -> None:
        """Drop the errors of the fields the chosen kinds leave out: their values do not count."""
        shown = set(TARGET_KINDS[target]) | set(SCHEDULE_KINDS[schedule])
        for name in KIND_FIELDS - shown:
            self._errors.pop(name, None)
            self.cleaned_data.pop(name, None)

    def target_spec(self, target: str) -> dict:
        """The JobSpec values of the chosen target (the other kinds' blank)."""
        data = self.cleaned_data
        spec = {**TARGET_BLANKS, "target_kind": target}
        if target == TargetKind.TASK:
            spec.update(task_name=data.get("task_name") or "", args=data.get("args"), kwargs=data.get("kwargs"))
        elif target == TargetKind.HTTP:
            spec["http"] = {
                "method": data.get("http_method") or "POST",
                "url": data.get("http_url") or "",
                "headers": jsonb_safe(data.get("http_headers")) or {},
                "body": data.get("http_body") or "",
            }
        elif target in (TargetKind.COMMAND, TargetKind.SQL):
            params = jsonb_safe(data.get(f"{target}_params"))
            spec[target] = {"name": data.get(f"{target}_name") or "", "params": {} if params is None else params}
        else:
            grace = data.get("grace_seconds")
            spec["monitor"] = {"grace_seconds": monitor.DEFAULT_GRACE_SECONDS if grace is None else grace}
        return spec

    def schedule_spec(self, schedule: str) -> dict:
        """The JobSpec values of the chosen schedule (the other kinds' blank)."""
        data = self.cleaned_data
        spec = dict(SCHEDULE_BLANKS)
        for name in SCHEDULE_KINDS[schedule]:
            value = data.get(name)
            if name in ("calendar", "after_job"):  # the services take these by name, in the job's tenant
                value = value.name if value else ""
            key = FORM_TO_SPEC.get(name, name)
            spec[key] = SCHEDULE_BLANKS[key] if value in (None, "") else value
        return spec


# The schedule kind a form without its selector means: the first of these fields it fills.
INFERRED_SCHEDULE = (
    ("after", "after_job"),
    ("window", "flex_window"),
    ("every", "every_seconds"),
    ("at", "run_at"),
)


def schedule_kind_of(job: Job) -> str:
    if job.after_job_id is not None:
        return "after"
    if job.flex_window:
        return "window"
    if job.cron:
        return "cron"
    return "every" if job.every_seconds is not None else "at"


def neutral_values(now: datetime) -> dict[str, dict[str, Any]]:
    """For a new job: what sets a refused part aside (a value the services accept), by the
    JobSpec key or group a refusal names."""
    valid_schedule = {**SCHEDULE_BLANKS, "cron": "0 0 * * *"}
    return {
        "target": {**TARGET_BLANKS, "target_kind": TargetKind.MONITOR.value, "overlap_policy": "allow"},
        "schedule": valid_schedule,
        "cron": {"cron": "0 0 * * *"},
        "every": {"every": 3600},
        "at": {"at": now + timedelta(days=1)},
        "flex_window": {"flex_window": "daily 00:00-01:00", "flex_scope": ""},
        "flex_scope": {"flex_scope": ""},
        "timezone": {"timezone": "UTC"},
        "start_at": {"start_at": None},
        "end_at": {"end_at": None},
        "jitter_seconds": {"jitter_seconds": 0},
        "calendar": {"calendar": "", "calendar_policy": "skip"},
        "calendar_policy": {"calendar_policy": "skip"},
        "name": {"name": "job"},
        "description": {"description": ""},
        "tags": {"tags": []},
        "args": {"args": []},
        "kwargs": {"kwargs": {}},
        "queue": {"queue": ""},
        **{name: {name: getattr(services.JobSpec, name)} for name in POLICY_FIELDS},
    }


def refused_key(field: str) -> str:
    """The JobSpec key or group a refusal's field names ("http.url" -> target, "tags.1" -> tags)."""
    head = field.partition(".")[0]
    return REFUSED_GROUP.get(head, FORM_TO_SPEC.get(head, head))


class SetAside(Protocol):
    def __call__(self, values: dict, key: str) -> dict | None:
        """`values` with the part named `key` set aside, or None when it cannot be."""


def collect_refusals(
    check: Callable[[dict], T], values: dict, set_aside: SetAside, *, broken: set[str] = frozenset()
) -> tuple[T | None, list[services.InvalidInput]]:
    """Run `check` (a service's validation) on `values`; on a refusal, note it, set the refused
    part aside and check again, until it passes or nothing more can be set aside. The parts in
    `broken` (whose form fields are already in error) are set aside first. Returns the check's
    result (None after any refusal) and the refusals."""
    for key in broken:
        values = set_aside(values, key) or values
    refusals: list[services.InvalidInput] = []
    for _ in range(len(values) + 2):
        try:
            result = check(values)
        except services.InvalidInput as exc:
            refusals.append(exc)
            aside = set_aside(values, refused_key(exc.field))
            if aside is None or aside == values:
                break
            values = aside
        else:
            return (None if refusals or broken else result), refusals
    return None, refusals


def aside_for_new(now: datetime) -> SetAside:
    """A new job's refused part is replaced with a value the services accept."""
    neutral = neutral_values(now)

    def set_aside(values: dict, key: str) -> dict | None:
        return {**values, **neutral[key]} if key in neutral else None

    return set_aside


def aside_for_edit(values: dict, key: str) -> dict | None:
    """An edit's refused part is left as the job has it (the change dropped)."""
    keys = {"target": TARGET_BLANKS, "schedule": SCHEDULE_BLANKS}.get(key, {key: None})
    if not set(keys) & set(values):
        return None
    return {name: value for name, value in values.items() if name not in keys}
