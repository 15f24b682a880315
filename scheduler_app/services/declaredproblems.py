"""Every problem of a declared job at once (schedules plan and apply): the job checks stop at
their first problem, so after each one the field it names is set to a value that passes (a
plain cron, the tenant's zone, the default of the field) and the job is checked again, until
it passes or a problem repeats. A bad cron and a bad zone in one job are both reported."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields, replace
from typing import Any

from scheduler_app.services.jobspec import JobSpec
from scheduler_app.validation import InvalidInput

# A field a problem names, as JobSpec spells it.
SPEC_NAME = {"task": "task_name", "window": "flex_window", "window_scope": "flex_scope"}
# Values that pass, for the fields whose default would leave the job without a schedule.
PASSING = {"cron": "0 0 * * *", "every": 3600}
MAX_PROBLEMS = 20  # per job: a declaration wrong in more places than this is read a screen at a time
DEFAULTS: dict[str, Any] = {field.name: field.default for field in fields(JobSpec) if field.name != "name"}


def every_problem(first: InvalidInput, spec: JobSpec, check: Callable[[JobSpec], object]) -> list[InvalidInput]:
    """`first` (what checking `spec` raised) and each problem `check` finds once the fields
    named before it are set to passing values."""
    problems, tried = [first], set()
    problem = first
    while len(problems) < MAX_PROBLEMS:
        name = SPEC_NAME.get(problem.field, problem.field)
        if name not in DEFAULTS or name in tried:
            break
        tried.add(name)
        passing: Any = PASSING[name] if name in PASSING and getattr(spec, name) not in (None, "") else DEFAULTS[name]
        spec = replace(spec, **{name: passing})
        try:
            check(spec)
        except InvalidInput as again:
            if SPEC_NAME.get(again.field, again.field) in tried:
                break  # the passing value did not pass: what is left follows from the first
            problems.append(again)
            problem = again
        else:
            break
    return problems
