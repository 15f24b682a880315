"""`manage.py alerts`: set, show, delete and list against the real PostgreSQL; bad values end
with one line naming the option (exit status 2)."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from django.core.management.base import CommandError

from scheduler_app import services
from scheduler_app.models import Alert, AlertKind, AlertRule, AuditEvent, Job, db_now
from tests.support.cli import cli, fails, run  # noqa: F401 - cli is a fixture

TASK = "scheduler_app.echo"


@pytest.fixture
def job(db) -> Job:
    tenant = services.tenant_create(slug="acme", name="Acme")
    return services.job_create(tenant, services.JobSpec(name="nightly", task_name=TASK, every=60))


def raise_alert(job: Job, kind: str, *, minutes_ago: float, delivered: bool = False) -> Alert:
    at = db_now() - timedelta(minutes=minutes_ago)
    return Alert.objects.create(
        job=job,
        tenant=job.tenant,
        kind=kind,
        dedup_key=f"{job.id}:{kind}:{minutes_ago}",
        message=f"{job.tenant.slug}/{job.name}: {kind}",
        raised_at=at,
        delivered_at=at if delivered else None,
        delivery_attempts=int(delivered),
    )


def test_set_makes_the_rule_from_the_options_then_changes_only_those_given(job):
    out = run(
        "alerts",
        "set",
        "acme/nightly",
        "--no-success",
        "26h",
        "--grace",
        "1h",
        "--on-failure",
        "--max-duration",
        "90m",
        "--email",
        "ops@example.com",
        "dev@example.com",
        "--webhook",
        "https://hooks.example.com/cron",
    )
    run("alerts", "set", str(job.id), "--min-duration", "0.5", "--no-on-failure", "--cooldown", "10m", "--disable")

    rule = AlertRule.objects.get(job=job)
    assert (rule.no_success_seconds, rule.grace_seconds, rule.max_duration_seconds, rule.min_duration_seconds) == (
        93600,
        3600,
        5400,
        0.5,
    )
    assert (rule.on_failure, rule.enabled, rule.cooldown_seconds) == (False, False, 600)
    assert rule.emails == ["ops@example.com", "dev@example.com"]
    assert rule.webhook_url == "https://hooks.example.com/cron"
    assert f"alert rule of job {job.id} (acme/nightly)" in out
    assert "no_success_seconds     93600 s (26 h)" in out and "emails                 ops@example.com, dev" in out
    assert list(AuditEvent.objects.filter(action="job.alerts_set").values_list("actor", flat=True)) == ["cli"] * 2


def test_none_stops_watching_a_condition_and_no_email_clears_the_list(job):
    run("alerts", "set", "acme/nightly", "--max-lag", "30s", "--email", "ops@example.com")

    run("alerts", "set", "acme/nightly", "--max-lag", "none", "--no-email")

    rule = AlertRule.objects.get(job=job)
    assert (rule.max_start_lag_seconds, rule.emails) == (None, [])


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["--max-lag", "soon"],
            'alerts set: --max-lag: \'soon\' is not a duration ("26h", "90m", "45s", "1h30m" or seconds, or none)',
        ),
        (["--grace", "none"], "alerts set: --grace: 'none' is not a duration"),
        (["--no-success", "1.5"], "alerts set: --no-success: '1.5' is not a whole number of seconds"),
        (
            ["--max-duration", "0"],
            "alerts set: --max-duration: must be a number of seconds between 0 and 366 days, or none",
        ),
        (["--cooldown", "400d"], "alerts set: --cooldown: must be a whole number of seconds, 0 to 366 days"),
        (["--min-duration", "10m", "--max-duration", "5m"], "alerts set: --min-duration: must be below --max-duration"),
        (["--email", "ops@example.com", "nobody"], "alerts set: --email: 'nobody' is not an e-mail address"),
        (["--email", "ops@example.com", "--no-email"], "alerts set: --email: give --email or --no-email, not both"),
        (["--webhook", "ftp://hooks.example.com/"], "alerts set: --webhook: scheme 'ftp' is not allowed"),
        (["--webhook", "http://127.0.0.1/"], "alerts set: --webhook: a loopback address is not allowed"),
        ([], "alerts set: set: give at least one option to set"),
    ],
)
def test_bad_values_name_the_option_and_write_nothing(job, args, line):
    error = fails("alerts", "set", "acme/nightly", *args)

    assert str(error).startswith(line) and error.returncode == 2, str(error)
    assert not AlertRule.objects.exists()


def test_an_unknown_job_is_one_line(job):
    assert str(fails("alerts", "show", "acme/nope")) == "alerts show: job: no job 'acme/nope'"
    assert str(fails("alerts", "set", "nope", "--on-failure")) == (
        "alerts set: job: 'nope' is neither a job id nor TENANT/NAME"
    )


def test_the_command_line_prints_one_line_and_exits_2(job, cli):
    status, out, err = cli("alerts", "set", "acme/nightly", "--max-lag", "soon")

    assert status == 2 and out == ""
    assert err.strip().splitlines() == [
        'alerts set: --max-lag: \'soon\' is not a duration ("26h", "90m", "45s", "1h30m" or seconds, or none)'
    ]


def test_show_prints_the_rule_and_the_latest_alerts(job):
    assert "(none: alerts set JOB ... makes one)" in run("alerts", "show", "acme/nightly")
    run("alerts", "set", "acme/nightly", "--on-failure")
    raise_alert(job, AlertKind.FAILED, minutes_ago=5, delivered=True)

    out = run("alerts", "show", "acme/nightly")

    assert "on_failure             yes" in out and "cooldown_seconds       3600 s (1 h)" in out
    assert "failed  -    0           delivered  acme/nightly: failed" in out


def test_a_failing_delivery_says_it_is_retrying_with_its_last_error(job):
    alert = raise_alert(job, AlertKind.FAILED, minutes_ago=5)
    Alert.objects.filter(id=alert.id).update(
        delivery_attempts=3,
        next_delivery_at=db_now() + timedelta(minutes=1),
        delivery_log=[{"error": "ConnectionRefusedError: [Errno 111] Connection refused"}],
    )

    out = run("alerts", "list", "--tenant", "acme")

    assert "failing, retrying at " in out and "(3 attempts so far; last error: ConnectionRefusedError" in out
    assert "pending" not in out


def test_delete_asks_unless_yes(job):
    run("alerts", "set", "acme/nightly", "--on-failure")

    refused = fails("alerts", "delete", "acme/nightly")
    declined_input = io.StringIO("n\n")
    declined_input.isatty = lambda: True
    with pytest.raises(CommandError) as declined:
        run_with_stdin(declined_input, "alerts", "delete", "acme/nightly")
    assert AlertRule.objects.filter(job=job).exists()
    out = run("alerts", "delete", "acme/nightly", "--yes")

    assert "no terminal to ask for confirmation; pass --yes" in str(refused) and refused.returncode == 2
    assert str(declined.value) == "alerts delete: not deleted" and declined.value.returncode == 1
    assert out == f"Deleted the alert rule of job {job.id} (acme/nightly).\n"
    assert not AlertRule.objects.filter(job=job).exists()
    assert AuditEvent.objects.filter(action="job.alerts_deleted", actor="cli").count() == 1
    assert str(fails("alerts", "delete", "acme/nightly", "--yes")) == (
        f"alerts delete: job: job {job.id} (acme/nightly) has no alert rule"
    )


def run_with_stdin(stdin, *args: str) -> str:
    from django.core.management import call_command

    out = io.StringIO()
    call_command(*args, stdin=stdin, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_list_filters_by_tenant_job_kind_and_delivery_newest_first(job):
    other_tenant = services.tenant_create(slug="other", name="Other")
    other = services.job_create(other_tenant, services.JobSpec(name="sync", task_name=TASK, every=60))
    failed = raise_alert(job, AlertKind.FAILED, minutes_ago=30, delivered=True)
    silent = raise_alert(job, AlertKind.NO_SUCCESS, minutes_ago=20)
    elsewhere = raise_alert(other, AlertKind.FAILED, minutes_ago=10)

    def ids(*args: str) -> list[int]:
        lines = run("alerts", "list", *args).splitlines()[2:]
        return [int(line.split()[0]) for line in lines]

    assert ids() == [elsewhere.id, silent.id, failed.id]
    assert ids("--tenant", "acme") == [silent.id, failed.id]
    assert ids("--job", "other/sync") == [elsewhere.id]
    assert ids("--kind", "failed") == [elsewhere.id, failed.id]
    assert ids("--undelivered") == [elsewhere.id, silent.id]
    assert ids("--limit", "1") == [elsewhere.id]
    assert run("alerts", "list", "--kind", "too_short") == "(no alerts)\n"
    header = run("alerts", "list").splitlines()[0].split()
    assert header == ["id", "raised_at", "job", "kind", "run", "suppressed", "delivery", "message"]
    assert str(fails("alerts", "list", "--kind", "bad")).startswith("alerts list: kind: must be one of no_success")
    assert str(fails("alerts", "list", "--limit", "0")) == "alerts list: limit: must be between 1 and 1000"
    assert str(fails("alerts", "list", "--tenant", "nope")).startswith("alerts list: tenant:")
