"""The import of a crontab file as monitored jobs (`manage.py import_crontab`).

A user crontab's lines (crontab(5)): five time fields and a command, or a macro (@daily,
@hourly, ...) and a command. Blank lines and comments are passed over; environment lines
(MAILTO=ops@example.com, SHELL=/bin/bash, CRON_TZ=...) are skipped with a note (they say
nothing about when the job runs; CRON_TZ and TZ are taken as the zone of the lines after
them). Each job's description is the command as written, its name derived from the
command, its schedule the line's, its zone the file's (or the tenant's). The whole file is
imported in one transaction: a line that cannot be read, or whose job cannot be made,
refuses the import naming the line's number, and nothing is created.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from django.db import transaction

from scheduler_app.models import Job, Tenant
from scheduler_app.services.jobs import job_create
from scheduler_app.services.jobspec import JobSpec
from scheduler_app.validation import InvalidInput

ENV_LINE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*)$")
NAME_MAX = 60
MAX_LINES = 10_000


@dataclass(frozen=True)
class CronLine:
    number: int  # 1-based line number in the file
    cron: str
    timezone: str  # "" the tenant's
    command: str


@dataclass
class Parsed:
    lines: list[CronLine]
    notes: list[str]


def parse_crontab(text: str) -> Parsed:
    """The schedule lines of a crontab file, and notes on what was skipped. InvalidInput
    names the line ("line 7") of a line that is neither a comment, an environment setting
    nor a schedule and a command."""
    parsed = Parsed([], [])
    zone = ""
    rows = text.splitlines()
    if len(rows) > MAX_LINES:
        raise InvalidInput("file", f"has {len(rows)} lines; at most {MAX_LINES} are imported at once")
    for number, raw in enumerate(rows, start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        env = ENV_LINE.match(line)
        if env:
            name, value = env.group(1), env.group(2).strip().strip("'\"")
            if name in ("CRON_TZ", "TZ"):
                zone = value
                parsed.notes.append(f"line {number}: {name}={value}: the zone of the lines below")
            else:
                parsed.notes.append(f"line {number}: environment setting {name} skipped (not a schedule)")
            continue
        parsed.lines.append(_schedule_line(number, line, zone))
    return parsed


def _schedule_line(number: int, line: str, zone: str) -> CronLine:
    field = f"line {number}"
    if line.startswith("@"):
        macro, _, command = line.partition(" ")
        if macro.lower() == "@reboot":
            raise InvalidInput(field, "@reboot has no schedule to monitor")
        cron = macro
    else:
        parts = line.split(None, 5)
        if len(parts) < 6:
            raise InvalidInput(field, "must be five time fields and a command, or a macro (@daily ...) and a command")
        cron, command = " ".join(parts[:5]), parts[5]
    command = command.strip()
    if not command:
        raise InvalidInput(field, "has a schedule but no command")
    return CronLine(number, cron, zone, command)


def name_of(command: str) -> str:
    """A job name from a command: the program's base name and its first words, up to a
    redirection, a pipe or a list operator ("/usr/local/bin/backup.sh --full > /dev/null"
    is "backup.sh-full")."""
    words = []
    for word in command.split():
        if word[0] in "<>|;&" or word[:2] in ("1>", "2>"):
            break
        words.append(word)
    if not words:
        words = command.split()[:1]
    words[0] = words[0].rsplit("/", 1)[-1] or words[0]
    name = re.sub(r"[^A-Za-z0-9._]+", "-", "-".join(words[:4])).strip("-.").lower()
    return name[:NAME_MAX].rstrip("-") or "cron-job"


def import_crontab(
    tenant: Tenant, text: str, *, grace_seconds: int = 300, tags: list[str] | None = None, actor: str = ""
) -> tuple[list[Job], list[str]]:
    """Create one monitored job per schedule line of `text`, all or none; return the jobs
    (in line order) and the notes on lines skipped."""
    parsed = parse_crontab(text)
    if not parsed.lines:
        raise InvalidInput("file", "has no schedule lines")
    taken = set(Job.objects.filter(tenant=tenant).values_list("name", flat=True))
    jobs = []
    with transaction.atomic():
        for line in parsed.lines:
            name = _unique(name_of(line.command), taken)
            spec = JobSpec(
                name=name,
                target_kind="monitor",
                monitor={"grace_seconds": grace_seconds},
                cron=line.cron,
                timezone=line.timezone,
                description=line.command,
                tags=list(tags or []),
            )
            try:
                jobs.append(job_create(tenant, spec, actor=actor))
            except InvalidInput as exc:
                raise InvalidInput(f"line {line.number}", f"{exc.field}: {exc.message}") from None
    return jobs, parsed.notes


def _unique(name: str, taken: set[str]) -> str:
    candidate, n = name, 1
    while candidate in taken:
        n += 1
        candidate = f"{name[: NAME_MAX - 4]}-{n}"
    taken.add(candidate)
    return candidate
