"""`manage.py jobs add`: each schedule and option, bad input naming the field in one line
on stderr with status 2 (and nothing written), through call_command and through Django's
real argv path in this process. The exit status of a real manage.py process is tested in
tests/system/management/test_commands_add.py; the other commands' tests are in
test_commands.py and test_commands_edit.py."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

import pytest

from scheduler_app.models import AuditEvent, Job, db_now
from tests.support.cli import (  # noqa: F401 (acme, cli and tokyo are fixtures)
    TASK,
    acme,
    add_job,
    cli,
    fails,
    hour_after,
    run,
    table_rows,
    tokyo,
)

BAD_CRON_LINE = "jobs add: cron: Bad day-of-month in '0 0 31 2 *'"


# --- jobs add -------------------------------------------------------------------------


def test_add_cron_job_prints_its_id_and_next_fires_in_its_zone_and_utc(tokyo):
    out = run("jobs", "add", "--tenant", "tokyo", "--name", "report", "--cron", "0 9 * * *", "--task", TASK)

    job = Job.objects.get()
    assert out.splitlines()[0] == f"Created job {job.id}: tokyo/report"
    assert (job.cron, job.timezone, job.enabled) == ("0 9 * * *", "Asia/Tokyo", True)  # the tenant's zone
    fires = table_rows(out)
    assert len(fires) == 5
    for _index, local, utc in fires:
        assert re.fullmatch(r"\d{4}-\d\d-\d\d 09:00:00 JST", local)
        assert re.fullmatch(r"\d{4}-\d\d-\d\d 00:00:00Z", utc)
    assert fires[0][2] == job.next_run_at.strftime("%Y-%m-%d %H:%M:%SZ")
    assert AuditEvent.objects.get(action="job.created").actor == "cli"


def test_add_interval_job(acme):
    out = run("jobs", "add", "--tenant", "acme", "--name", "tick", "--every", "90", "--task", TASK)

    job = Job.objects.get()
    assert job.every_seconds == 90 and job.anchor_at is not None
    fires = [datetime.strptime(row[1], "%Y-%m-%d %H:%M:%S UTC") for row in table_rows(out)]
    assert [later - earlier for earlier, later in zip(fires, fires[1:])] == [timedelta(seconds=90)] * 4
    assert "schedule: every 90s" in out


def test_add_one_off_job(acme):
    at = hour_after(db_now())

    out = run("jobs", "add", "--tenant", "acme", "--name", "once", "--at", at.isoformat(), "--task", TASK)

    job = Job.objects.get()
    assert job.run_at == at and job.next_run_at == at
    assert len(table_rows(out)) == 1
    assert at.strftime("%Y-%m-%d %H:%M:%SZ") in out


def test_add_with_every_option(acme):
    start = (db_now() + timedelta(hours=2)).replace(minute=0, second=0, microsecond=0)
    end = start + timedelta(days=30)

    run(
        "jobs",
        "add",
        "--tenant",
        "acme",
        "--name",
        "full",
        "--cron",
        "@hourly",
        "--timezone",
        "Europe/Paris",
        "--task",
        TASK,
        "--args",
        '[1, "two"]',
        "--kwargs",
        '{"x": {"y": null}}',
        "--queue",
        "reports",
        "--timeout",
        "60",
        "--max-attempts",
        "5",
        "--retry-backoff",
        "30",
        "--misfire",
        "run_all",
        "--priority",
        "9",
        "--catchup-window",
        "3600",
        "--run-all-cap",
        "7",
        "--start",
        start.isoformat(),
        "--end",
        end.isoformat().replace("+00:00", "Z"),
        "--tag",
        "a",
        "b",
        "--tag",
        "c",
        "--description",
        "Everything set",
    )

    job = Job.objects.get()
    assert (job.cron, job.timezone, job.args, job.kwargs, job.queue) == (
        "0 * * * *",
        "Europe/Paris",
        [1, "two"],
        {"x": {"y": None}},
        "reports",
    )
    assert (job.timeout_seconds, job.max_attempts, job.retry_backoff_seconds, job.priority) == (60, 5, 30, 9)
    assert (job.misfire_policy, job.catchup_window_seconds, job.run_all_cap) == ("run_all", 3600, 7)
    assert (job.start_at, job.end_at, job.next_run_at) == (start, end, start)
    assert (job.tags, job.description) == (["a", "b", "c"], "Everything set")


BAD_ADD_INPUT = [
    # (extra argv, message the single error line starts with)
    (["--tenant", "nope", "--cron", "@daily"], "jobs add: tenant: no tenant 'nope'"),
    (["--cron", "0 0 31 2 *"], BAD_CRON_LINE),
    (["--cron", "* * *"], "jobs add: cron: must have 5 fields"),
    (["--cron", "@daily", "--timezone", "Nowhere/Land"], "jobs add: timezone: unknown time zone"),
    (["--cron", "@daily", "--args", "[1,"], "jobs add: args: not valid JSON"),
    (["--cron", "@daily", "--args", '{"a": 1}'], "jobs add: args: must be a JSON array"),
    (["--cron", "@daily", "--args", "[NaN]"], "jobs add: args: NaN is not allowed"),
    (["--cron", "@daily", "--kwargs", "[1]"], "jobs add: kwargs: must be a JSON object"),
    (["--cron", "@daily", "--kwargs", '{"a": "\\u0000"}'], "jobs add: kwargs: must not contain NUL"),
    (["--at", "2031-01-01T09:00:00"], "jobs add: at: '2031-01-01T09:00:00' has no UTC offset"),
    (["--at", "next tuesday"], "jobs add: at: 'next tuesday' is not an ISO 8601 date and time"),
    (["--at", "2020-01-01T00:00:00Z"], "jobs add: at: is in the past"),
    (["--cron", "@daily", "--start", "2031-01-01"], "jobs add: start_at: '2031-01-01' has no UTC offset"),
    (["--cron", "@daily", "--end", "31/12/2031"], "jobs add: end_at: '31/12/2031' is not an ISO 8601"),
    (
        ["--cron", "@daily", "--start", "2031-02-01T00:00Z", "--end", "2031-01-01T00:00Z"],
        "jobs add: end_at: must not be before start_at",
    ),
    (["--cron", "@daily", "--end", "2020-01-01T00:00:00Z"], "jobs add: end_at: is in the past (2020-01-01 00:00:00Z)"),
    (
        ["--at", "\uff12\uff10\uff13\uff11-01-01T09:00:00Z"],
        "jobs add: at: must be written with ASCII characters, digits 0-9; U+FF12 FULLWIDTH DIGIT TWO is not one",
    ),
    (
        ["--cron", "@daily", "--start", "2031-01-01T00:00:00.000000\uff11Z"],
        "jobs add: start_at: must be written with ASCII characters, digits 0-9; U+FF11",
    ),
    (["--cron", "@daily", "--end", "2031-01-01T00:00:00\u0663Z"], "jobs add: end_at: must be written with ASCII"),
    (["--every", "0"], "jobs add: every: must be between 1 and"),
    (["--cron", "@daily", "--misfire", "sometimes"], "jobs add: misfire_policy: must be one of"),
    (["--cron", "@daily", "--timeout", "0"], "jobs add: timeout_seconds: must be between 1 and"),
    (["--cron", "@daily", "--priority", "10"], "jobs add: priority: must be between 0 and 9"),
    (["--cron", "@daily", "--max-attempts", "0"], "jobs add: max_attempts: must be between 1 and"),
    (["--cron", "@daily", "--task", "os.system"], "jobs add: task: 'os.system' is not an allowed task"),
    (["--cron", "@daily", "--name", "   "], "jobs add: name: must not be empty"),
    (["--cron", "@daily", "--name", "existing"], "jobs add: name: tenant 'acme' already has a job named"),
    (["--cron", "@daily", "--name", "a\u2028b"], "jobs add: name: must not contain the character U+2028"),
    (
        ["--cron", "@daily", "--description", "pays \u202e001$"],
        "jobs add: description: must not contain the character U+202E RIGHT-TO-LEFT OVERRIDE",
    ),
    (["--cron", "@daily", "--description", "\x1b[2J"], "jobs add: description: must not contain the character U+001B"),
    (["--cron", "@daily", "--tag", "ok", "a\u2029b"], "jobs add: tags.1: must not contain the character U+2029"),
]


def add_argv(extra: list[str]) -> list[str]:
    argv = ["jobs", "add"]
    if "--tenant" not in extra:
        argv += ["--tenant", "acme"]
    if "--name" not in extra:
        argv += ["--name", "new-job"]
    if "--task" not in extra:
        argv += ["--task", TASK]
    return argv + extra


@pytest.mark.parametrize(("extra", "expected"), BAD_ADD_INPUT, ids=[case[1] for case in BAD_ADD_INPUT])
def test_add_refuses_bad_input_naming_the_field_and_writes_nothing(acme, extra, expected):
    add_job(acme, "existing")
    jobs, events = Job.objects.count(), AuditEvent.objects.count()

    error = fails(*add_argv(extra))

    assert str(error).startswith(expected), str(error)
    assert "\n" not in str(error)
    assert error.returncode == 2
    assert (Job.objects.count(), AuditEvent.objects.count()) == (jobs, events)


def test_add_keeps_each_tag_once_in_first_order(acme):
    run(*add_argv(["--cron", "@daily", "--tag", "b", "a", "--tag", "b", "c", "a"]))

    assert Job.objects.get(name="new-job").tags == ["b", "a", "c"]


@pytest.mark.parametrize(("extra", "expected"), BAD_ADD_INPUT[:12], ids=[case[1] for case in BAD_ADD_INPUT[:12]])
def test_add_bad_input_from_the_command_line_is_one_stderr_line_and_status_2(acme, cli, extra, expected):
    status, out, err = cli(*add_argv(extra))

    assert status == 2
    assert out == ""
    assert err.endswith("\n") and err.count("\n") == 1 and err.startswith(expected), err
    assert Job.objects.count() == 0


def test_bad_cron_line_is_exactly_the_documented_one(acme, cli):
    assert cli(*add_argv(["--cron", "0 0 31 2 *"]))[2] == BAD_CRON_LINE + "\n"


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ([], "jobs add: give exactly one of --cron, --every, --at"),
        (["--cron", "@daily", "--every", "5"], "jobs add: give exactly one of --cron, --every, --at"),
        (
            ["--cron", "@daily", "--every", "5", "--at", "2031-01-01T00:00Z"],
            "jobs add: give exactly one of --cron, --every, --at",
        ),
        (
            ["--cron", "@daily", "--http-url", "https://example.com/"],
            "jobs add: give exactly one of --task, --http-url, --command, --sql, --monitor",
        ),
    ],
)
def test_add_with_two_schedules_or_none_says_so_in_one_line(acme, cli, extra, expected):
    status, out, err = cli(*add_argv(extra))

    assert (status, out, err) == (2, "", expected + "\n")
    assert Job.objects.count() == 0


def test_add_without_a_target_says_so_in_one_line(acme, cli):
    status, _, err = cli("jobs", "add", "--tenant", "acme", "--name", "x", "--every", "5")

    assert (status, err) == (2, "jobs add: give exactly one of --task, --http-url, --command, --sql, --monitor\n")


def test_other_syntax_errors_are_argparse_usage_errors(acme, cli):
    status, _, err = cli(*add_argv(["--every", "often"]))

    assert status == 2
    assert "argument --every: invalid int value: 'often'" in err
    assert Job.objects.count() == 0


def test_http_options_without_an_http_target_are_refused(acme):
    error = fails(*add_argv(["--every", "60", "--body", "{}"]))

    assert str(error) == "jobs add: http: --body is for HTTP jobs only (--http-url)"
