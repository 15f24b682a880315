"""What an operator reads in the console (issue 24, item 4): start lags without the retry
backoff, alert texts, plurals and units, the admin's names and links, tags, /api/v1/me. How a
small duration and its threshold are written is tested in tests/unit/admin/test_console_words.py."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command

from scheduler_app import alerts, services
from scheduler_app.models import Alert, AlertKind, AlertRule, Job, JobRun, RunState, Tenant, Trigger, db_now
from tests.integration.api.test_api import client_for
from tests.support.admin import change_form, url

TASK = "scheduler_app.echo"
BASE = datetime(2024, 1, 1, 18, 33, 5, tzinfo=UTC)
_keys = itertools.count()


@pytest.fixture
def tenant(db) -> Tenant:
    return services.tenant_create(slug="demo", name="Demo", timezone="UTC")


@pytest.fixture
def job(tenant) -> Job:
    return services.job_create(tenant, services.JobSpec(name="flaky", task_name=TASK, cron="*/5 * * * *"))


def retried_run(job: Job, at: datetime) -> JobRun:
    """A dead run whose attempt 1 started 0.5 s after its fire time, attempt 2 after 6 s
    of backoff, 0.25 s after it was queued again."""
    return JobRun.objects.create(
        job=job,
        tenant=job.tenant,
        scheduled_at=at,
        state=RunState.DEAD,
        trigger=Trigger.SCHEDULE,
        attempt=2,
        created_at=at,
        dispatched_at=at + timedelta(seconds=0.1),
        enqueued_at=at + timedelta(seconds=6),
        started_at=at + timedelta(seconds=6.25),
        finished_at=at + timedelta(seconds=7),
        error="RuntimeError: no",
    )


# --- 1. start lag and the run's times -------------------------------------------------------


def test_the_job_page_s_start_lag_leaves_out_the_retry_backoff(admin_client, job):
    retried_run(job, db_now() - timedelta(hours=1))

    html = admin_client.get(url("job", "change", job.pk)).content.decode()

    recent = html.split('id="cf-recent-runs"')[1].split("</table>")[0]
    assert "0.25 s" in recent and "6.25 s" not in recent


def test_the_run_page_s_lags_and_times_read_in_order(admin_client, job):
    run = retried_run(job, BASE)

    html = admin_client.get(url("jobrun", "change", run.pk)).content.decode()

    assert "start 0.25 s" in html and "start 6.25 s" not in html
    assert "dispatch 0.10 s" in html
    first, last = html.index("First dispatched at"), html.index("Last queued at")
    assert first < last < html.index("Started at")
    assert html.index("2024-01-01 18:33:05 UTC", first) < last  # dispatched at 18:33:05.1
    assert "2024-01-01 18:33:11 UTC" in html[last : html.index("Started at")]  # queued again at 18:33:11


# --- 2. alert texts ---------------------------------------------------------------------


def test_a_too_long_alert_shows_a_small_threshold_and_duration_apart(job):
    now = db_now()
    alerts.rule_set(job, {"max_duration_seconds": 0.001}, actor="test")
    AlertRule.objects.update(checked_until=now - timedelta(hours=1), next_check_at=now)
    at = now - timedelta(minutes=10)
    JobRun.objects.create(
        job=job,
        tenant=job.tenant,
        scheduled_at=at,
        state=RunState.SUCCEEDED,
        created_at=at,
        started_at=at + timedelta(seconds=1),
        finished_at=at + timedelta(seconds=1.0042),
    )

    assert alerts.evaluate_due_rules(now) == 1

    message = Alert.objects.get(kind=AlertKind.TOO_LONG).message
    assert "took 0.0042 s (more than 0.001 s)" in message, message


def make_alert(job: Job, **fields) -> Alert:
    fields.setdefault("raised_at", db_now())
    return Alert.objects.create(
        job=job,
        tenant=job.tenant,
        kind=AlertKind.TOO_LONG,
        dedup_key=f"k{next(_keys)}",
        message=f"{job}: run 47 took 9 s (more than 1 s)",
        **fields,
    )


def test_failing_deliveries_say_failing_retrying_and_the_last_error(admin_client, job):
    log = [
        {
            "channel": "webhook",
            "at": "2024-01-01T00:00:00+00:00",
            "error": "ConnectionRefusedError: [Errno 111] Connection refused",
        },
        {"channel": "email", "at": "2024-01-01T00:00:00+00:00", "error": None},
    ]
    make_alert(job, delivery_attempts=1, next_delivery_at=db_now() + timedelta(minutes=1), delivery_log=log)

    html = admin_client.get(url("alert", "changelist")).content.decode()
    page = admin_client.get(url("job", "change", job.pk)).content.decode()

    for text in (html, page):
        assert (
            "failing, retrying at" in text
            and "(1 attempt so far; last error: ConnectionRefusedError: [Errno 111] Connection refused)" in text
        )
        assert "pending (" not in text and "1 attempts" not in text


def test_a_given_up_delivery_says_failed(admin_client, job):
    log = [{"channel": "webhook", "at": "2024-01-01T00:00:00+00:00", "error": "HTTP 500"}]
    make_alert(job, delivery_attempts=alerts.DELIVERY_ATTEMPTS, next_delivery_at=db_now(), delivery_log=log)

    html = admin_client.get(url("alert", "changelist")).content.decode()

    assert f"failed, gave up after {alerts.DELIVERY_ATTEMPTS} attempts; last error: HTTP 500" in html


def test_a_new_rule_counts_from_the_job_s_last_success(job):
    finished = db_now() - timedelta(hours=3)
    JobRun.objects.create(
        job=job,
        tenant=job.tenant,
        scheduled_at=finished - timedelta(seconds=5),
        state=RunState.SUCCEEDED,
        created_at=finished,
        started_at=finished - timedelta(seconds=4),
        finished_at=finished,
    )

    rule = alerts.rule_set(job, {"no_success_seconds": 3600}, actor="test")

    assert rule.last_success_at == finished
    other = services.job_create(job.tenant, services.JobSpec(name="fresh", task_name=TASK, cron="* * * * *"))
    assert alerts.rule_set(other, {"no_success_seconds": 3600}, actor="test").last_success_at is not None


# --- 3. plurals, units, names, links, tags ------------------------------------------------------


def test_deleting_a_job_with_one_run_says_one_run(job, capsys):
    JobRun.objects.create(job=job, tenant=job.tenant, scheduled_at=BASE, state=RunState.SUCCEEDED, created_at=BASE)

    call_command("jobs", "delete", f"{job.tenant.slug}/{job.name}", "--yes")

    out = capsys.readouterr().out
    assert "deletes its 1 run from the ledger" in out and "1 runs" not in out


def test_an_interval_of_days_reads_in_days(admin_client, tenant):
    two_days = services.job_create(tenant, services.JobSpec(name="slow", task_name=TASK, every=172800))
    services.job_create(tenant, services.JobSpec(name="odd", task_name=TASK, every=129600))

    html = admin_client.get(url("job", "changelist")).content.decode()

    assert "every 2 days" in html and "every 36 h" in html and "172800s" not in html
    assert "every 2 days" in admin_client.get(url("job", "change", two_days.pk)).content.decode()


def test_the_job_page_names_alert_kinds_in_words_on_one_line(admin_client, job):
    make_alert(job, delivery_attempts=0, next_delivery_at=db_now())

    page = admin_client.get(url("job", "change", job.pk)).content.decode()
    listing = admin_client.get(url("alert", "changelist")).content.decode()

    panel = page.split('id="cf-alerts"')[1].split("</section>")[0]
    assert "too long" in panel and "too_long" not in panel
    assert '<td class="cf-nowrap">' in panel  # the raised time
    assert "too long" in listing.lower() and ">too_long<" not in listing


def test_the_admin_is_named_cronfleet_and_view_site_opens_the_dashboard(admin_client, db):
    html = admin_client.get("/admin/").content.decode()

    assert "Django administration" not in html and "Django site admin" not in html
    assert "<title>Cronfleet administration | Cronfleet</title>" in html
    assert '<a href="/admin/dashboard/">View site</a>' in html
    assert admin_client.get("/admin/dashboard/").status_code == 200


def test_tags_are_edited_as_one_comma_separated_line(admin_client, tenant):
    job = services.job_create(
        tenant, services.JobSpec(name="tagged", task_name=TASK, cron="0 3 * * *", tags=["billing", "nightly"])
    )

    html = admin_client.get(url("job", "change", job.pk)).content.decode()
    saved = admin_client.post(url("job", "change", job.pk), change_form(job, tags="billing, eu ,, nightly"))
    refused = admin_client.post(url("job", "change", job.pk), change_form(job, tags="ok, " + "x" * 65))

    assert 'name="tags" value="billing, nightly"' in html and '<textarea name="tags"' not in html
    assert saved.status_code == 302, saved.content.decode()[:2000]
    job.refresh_from_db()
    assert job.tags == ["billing", "eu", "nightly"]
    assert refused.status_code == 200
    assert any("tags.1: must be at most 64 characters" in e for e in refused.context["adminform"].form.errors["tags"])


# --- 4. /api/v1/me with or without the slash ------------------------------------------------


@pytest.mark.parametrize("path", ["/api/v1/me", "/api/v1/me/"])
def test_me_answers_with_and_without_the_slash(tenant, path):
    response = client_for(tenant).get(path)

    assert response.status_code == 200, response.content
    assert response.json()["tenant"]["slug"] == "demo"
