"""Running `manage.py` commands in this process for the management tests (test_commands,
test_commands_add, test_commands_edit, test_alerts_cli): call_command with the output
captured, a failure's CommandError, Django's real argv path (the `cli` fixture), tenants in
a fixed zone, jobs and runs, and the rows of a printed table."""

from __future__ import annotations

import io
import re
from datetime import datetime, timedelta

import pytest
from django.core.management import ManagementUtility, call_command
from django.core.management import base as management_base
from django.core.management.base import CommandError

from scheduler_app import services
from scheduler_app.models import Job, JobRun, RunState, Tenant

TASK = "scheduler_app.echo"


def run(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def fails(*args: str) -> CommandError:
    with pytest.raises(CommandError) as caught:
        run(*args)
    return caught.value


@pytest.fixture
def cli(capsys, monkeypatch):
    """Run `manage.py ARGS` through Django's argv path in this process: (status, out, err).

    run_from_argv closes every connection when it ends, which would end the test's
    transaction; that one call is stubbed.
    """
    monkeypatch.setattr(management_base.connections, "close_all", lambda: None)

    def invoke(*argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        try:
            ManagementUtility(["manage.py", *argv]).execute()
            status = 0
        except SystemExit as exc:
            status = exc.code if isinstance(exc.code, int) else 1
        out, err = capsys.readouterr()
        return status, out, err

    return invoke


@pytest.fixture
def tokyo(db) -> Tenant:
    """A zone without daylight saving time, so expected local times never change."""
    return services.tenant_create(slug="tokyo", name="Tokyo office", timezone="Asia/Tokyo")


@pytest.fixture
def acme(db) -> Tenant:
    return services.tenant_create(slug="acme", name="Acme")


def add_job(tenant: Tenant, name: str = "nightly", **fields) -> Job:
    fields.setdefault("task_name", TASK)
    if not any(fields.get(key) for key in ("cron", "every", "at")):
        fields["cron"] = "0 9 * * *"
    return services.job_create(tenant, services.JobSpec(name=name, **fields))


def add_run(job: Job, scheduled_at: datetime, state: str = RunState.SUCCEEDED, **fields) -> JobRun:
    return JobRun.objects.create(
        job=job, tenant_id=job.tenant_id, scheduled_at=scheduled_at, state=state, created_at=scheduled_at, **fields
    )


def table_rows(output: str) -> list[list[str]]:
    """The cells of every row of the first table in `output` (after the dashed rule)."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if re.fullmatch(r"-[- ]*", line))
    rows = []
    for line in lines[start + 1 :]:
        if not line.strip() or line.startswith("("):
            break
        rows.append(re.split(r"\s{2,}", line.strip()))
    return rows


def hour_after(now: datetime) -> datetime:
    return (now + timedelta(hours=1)).replace(microsecond=0)
