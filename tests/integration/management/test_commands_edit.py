"""`manage.py jobs edit` and `jobs delete`: the impact shown before saving, the question asked
at a terminal (refused without one or --yes), bad input naming the field, and a change made
meanwhile not saved over. The same in a real process with no terminal is tested in
tests/system/management/test_commands_edit.py; the other commands' tests are in
test_commands.py."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from scheduler_app import services
from scheduler_app.models import AuditEvent, Job, JobRun, RunState, db_now
from tests.support.cli import (  # noqa: F401 (acme and tokyo are fixtures)
    TASK,
    acme,
    add_job,
    add_run,
    fails,
    hour_after,
    run,
    table_rows,
    tokyo,
)

# --- edit -----------------------------------------------------------------------------


class Terminal(io.StringIO):
    """A stdin that says it is a terminal, with the answers typed into it."""

    def isatty(self) -> bool:
        return True


def test_edit_shows_the_fires_before_and_after_then_saves_with_yes(tokyo):
    job = add_job(tokyo, cron="0 9 * * *")

    out = run("jobs", "edit", "tokyo/nightly", "--cron", "30 10 * * *", "--yes")

    job.refresh_from_db()
    assert (job.cron, job.version) == ("30 10 * * *", 2)
    lines = out.splitlines()
    assert lines[0] == f"Edit job {job.id} (tokyo/nightly):"
    assert "  cron  0 9 * * *  ->  30 10 * * *" in lines
    before, after = out.split("next 5 fires now:")[1].split("next 5 fires after the edit:")
    assert [row[1][11:] for row in table_rows(before)] == ["09:00:00 JST"] * 5
    assert [row[1][11:] for row in table_rows(after)] == ["10:30:00 JST"] * 5
    assert lines[-1] == f"Saved job {job.id} (tokyo/nightly) (version 2); next run at {utc_text(job.next_run_at)}."
    assert AuditEvent.objects.get(action="job.updated").detail["changes"]["cron"] == ["0 9 * * *", "30 10 * * *"]


def utc_text(value: datetime) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%SZ")


def test_edit_asks_at_a_terminal_and_saves_only_on_yes(acme):
    job = add_job(acme, every=60)

    with pytest.raises(CommandError) as declined:
        call_command("jobs", "edit", str(job.id), "--every", "120", stdin=Terminal("n\n"), stdout=io.StringIO())
    job.refresh_from_db()
    assert (job.every_seconds, job.version) == (60, 1)
    assert (str(declined.value), declined.value.returncode) == ("jobs edit: not saved", 1)

    out = io.StringIO()
    call_command("jobs", "edit", str(job.id), "--every", "120", stdin=Terminal("y\n"), stdout=out)
    job.refresh_from_db()
    assert (job.every_seconds, job.version) == (120, 2)
    assert "Save these changes? [y/N] Saved job" in out.getvalue()


def test_edit_without_a_terminal_or_yes_refuses_after_the_preview(acme):
    job = add_job(acme, every=60)
    out = io.StringIO()

    with pytest.raises(CommandError) as refused:
        call_command("jobs", "edit", str(job.id), "--every", "120", stdin=io.StringIO("y\n"), stdout=out)

    assert str(refused.value) == (
        "jobs edit: not saved: no terminal to ask for confirmation; pass --yes to go ahead without asking"
    )
    assert refused.value.returncode == 2
    assert "next 5 fires after the edit:" in out.getvalue()
    job.refresh_from_db()
    assert (job.every_seconds, job.version) == (60, 1)


def test_edit_changes_only_what_is_given(acme):
    job = add_job(
        acme,
        "hook",
        every=60,
        target_kind="http",
        task_name="",
        http={"method": "PUT", "url": "https://example.com/hook", "headers": {"X-A": "1"}, "body": "old"},
    )

    out = run("jobs", "edit", "acme/hook", "--body", '{"new": true}', "--priority", "8", "--yes")

    job.refresh_from_db()
    assert job.target_config == {
        "method": "PUT",
        "url": "https://example.com/hook",
        "headers": {"X-A": "1"},
        "body": '{"new": true}',
    }
    assert (job.every_seconds, job.priority) == (60, 8)
    before, after = out.split("next 5 fires now:")[1].split("next 5 fires after the edit:")
    assert table_rows(before) == table_rows(after)  # the schedule is untouched
    assert "due at once" not in out and "dropped" not in out


def test_edit_that_changes_nothing_saves_nothing(acme):
    job = add_job(acme, cron="0 9 * * *")

    out = run("jobs", "edit", str(job.id), "--cron", "0 9 * * *", "--task", TASK)

    assert out == f"Job {job.id} (acme/nightly) already has these values; nothing to save.\n"
    job.refresh_from_db()
    assert job.version == 1


def test_edit_can_remove_the_end_and_rename(acme):
    end = hour_after(db_now()) + timedelta(days=30)
    job = add_job(acme, cron="0 9 * * *", end_at=end)

    run("jobs", "edit", str(job.id), "--end", "none", "--name", "daily", "--tag", "x", "y", "--yes")

    job.refresh_from_db()
    assert (job.end_at, job.name, job.tags) == (None, "daily", ["x", "y"])


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], "jobs edit: job: nothing to change: give the options to change"),
        (["--cron", "0 0 31 2 *"], "jobs edit: cron: Bad day-of-month in '0 0 31 2 *'"),
        (["--cron", "@daily", "--every", "60"], "jobs edit: give at most one of --cron, --every, --at"),
        (["--task", TASK, "--command", "x"], "jobs edit: give at most one of --task, --http-url, --command"),
        (["--name", "other"], "jobs edit: name: tenant 'acme' already has a job named 'other'"),
        (["--task", "os.system"], "jobs edit: task: 'os.system' is not an allowed task"),
        (["--body", "{}"], "jobs edit: http: --body is for HTTP jobs only (--http-url)"),
        (["--start", "tomorrow"], "jobs edit: start_at: 'tomorrow' is not an ISO 8601 date and time"),
    ],
)
def test_edit_refuses_bad_input_naming_the_field(acme, argv, expected):
    job = add_job(acme)
    add_job(acme, "other")

    error = fails("jobs", "edit", "acme/nightly", *argv, "--yes")

    assert str(error).startswith(expected), str(error)
    assert error.returncode == 2
    job.refresh_from_db()
    assert job.version == 1


def test_edit_refuses_to_save_over_a_change_made_while_it_asked(acme):
    job = add_job(acme, every=60)

    class PausedMeanwhile(Terminal):
        def readline(self, *args) -> str:
            services.job_pause(job, note="someone else")
            return "y\n"

    with pytest.raises(CommandError) as refused:
        call_command("jobs", "edit", str(job.id), "--every", "120", stdin=PausedMeanwhile(), stdout=io.StringIO())

    assert str(refused.value).startswith(f"jobs edit: job {job.id} (acme/nightly) was changed by someone else")
    job.refresh_from_db()
    assert (job.every_seconds, job.enabled) == (60, False)


# --- delete ---------------------------------------------------------------------------


def test_delete_says_what_goes_and_deletes_with_yes(acme):
    job = add_job(acme)
    base = datetime(2024, 1, 1, tzinfo=UTC)
    add_run(job, base)
    add_run(job, base + timedelta(hours=1), RunState.QUEUED)

    out = run("jobs", "delete", "acme/nightly", "--yes")

    assert not Job.objects.exists() and not JobRun.objects.exists()
    assert out.splitlines() == [
        f"Job {job.id} (acme/nightly): cron 0 9 * * * (UTC), task {TASK}, enabled",
        "Deleting it deletes its 2 runs from the ledger too (1 pending, queued, running or retrying: "
        "their outcome will not be recorded).",
        f"Deleted job {job.id} (acme/nightly) and its 2 runs.",
    ]
    event = AuditEvent.objects.get(action="job.deleted")
    assert (event.job_name, event.actor) == ("nightly", "cli")


def test_delete_asks_and_refuses_without_a_terminal(acme):
    add_job(acme)

    with pytest.raises(CommandError) as declined:
        call_command("jobs", "delete", "acme/nightly", stdin=Terminal("\n"), stdout=io.StringIO())
    with pytest.raises(CommandError) as refused:
        call_command("jobs", "delete", "acme/nightly", stdin=io.StringIO("y\n"), stdout=io.StringIO())

    assert (str(declined.value), declined.value.returncode) == ("jobs delete: not deleted", 1)
    assert str(refused.value).startswith("jobs delete: not deleted: no terminal to ask for confirmation")
    assert refused.value.returncode == 2
    assert Job.objects.count() == 1
    call_command("jobs", "delete", "acme/nightly", stdin=Terminal("yes\n"), stdout=io.StringIO())
    assert Job.objects.count() == 0
