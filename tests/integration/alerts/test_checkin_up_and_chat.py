"""The "back up" alert of a monitored job (alerts/recovery.py) and the chat channel, a
Slack-compatible incoming webhook (alerts/chat.py), delivered to a local receiver that records
the JSON body. With a real beat: tests/system/alerts/test_checkin_up.py."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.test import Client

from scheduler_app import alerts, services
from scheduler_app.models import Alert, AlertKind, AlertRule, JobRun, Tenant, db_now
from scheduler_app.validation import InvalidInput
from tests.integration.api.test_api import client_for
from tests.integration.dispatch.test_checkins import fire_now, key_of, monitored, ping
from tests.support.http_receiver import Receiver


@pytest.fixture
def tenant(db) -> Tenant:
    return services.tenant_create(slug="ops", name="Ops")


@pytest.fixture
def receiver(settings):
    settings.CRONFLEET_HTTP_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    hook = Receiver([])
    yield hook
    hook.close()


def armed(job, **rule):
    made = alerts.rule_set(job, {"on_failure": True, "cooldown_seconds": 3600, **rule})
    AlertRule.objects.filter(id=made.id).update(checked_until=db_now() - timedelta(minutes=5), next_check_at=db_now())
    return made


def check(now=None) -> int:
    AlertRule.objects.update(next_check_at=db_now())
    return alerts.evaluate_due_rules(now or db_now())


def next_fire(job, previous: JobRun) -> JobRun:
    """The job's next fire: its runs so far moved a minute back (oldest first, each to a free
    minute), and a beat turn that fires it on this minute."""
    for run in JobRun.objects.filter(job=job).order_by("scheduled_at"):
        JobRun.objects.filter(id=run.id).update(scheduled_at=run.scheduled_at - timedelta(minutes=1))
    job.__class__.objects.filter(id=job.id).update(next_run_at=None)
    return fire_now(job)


def test_a_down_check_that_pings_success_raises_one_back_up_alert(tenant, settings):
    settings.CRONFLEET_ALERT_MIN_COOLDOWN_SECONDS = 60
    job, client = monitored(tenant, "nightly"), Client()
    armed(job)
    first = fire_now(job)
    ping(client, key_of(job), "1", body=b"disk full")
    assert check() == 1  # the failed check-in: down

    second = next_fire(job, first)
    ping(client, key_of(job), body=b"fine again")
    assert check() == 1
    third = next_fire(job, second)
    ping(client, key_of(job))  # up again, still up: no second recovery
    assert check() == 0

    up = Alert.objects.get(kind=AlertKind.CHECKIN_UP)
    down = Alert.objects.get(kind=AlertKind.FAILED)
    assert up.run_id == second.id and third.id
    assert up.message.startswith("back up after ") and up.message.endswith("— job ops/nightly")
    assert up.detail["down_alert_id"] == down.id


def test_no_back_up_alert_without_a_down_alert(tenant):
    job, client = monitored(tenant, "quiet"), Client()
    armed(job, on_failure=False, max_duration_seconds=3600)  # watches, but not for failures
    first = fire_now(job)
    ping(client, key_of(job), "fail")  # down, with no alert
    next_fire(job, first)
    ping(client, key_of(job))

    assert check() == 0
    assert not Alert.objects.exists()


def test_a_second_outage_raises_a_second_back_up_alert_past_the_cool_down(tenant, settings):
    settings.CRONFLEET_ALERT_MIN_COOLDOWN_SECONDS = 0
    job, client = monitored(tenant, "flappy"), Client()
    armed(job, cooldown_seconds=0)
    run = fire_now(job)
    for _ in range(2):
        ping(client, key_of(job), "fail")
        assert check() == 1
        run = next_fire(job, run)
        ping(client, key_of(job))
        assert check() == 1
        run = next_fire(job, run)

    assert Alert.objects.filter(kind=AlertKind.CHECKIN_UP).count() == 2


def test_an_alert_reaches_a_slack_compatible_hook_as_json_text_and_says_where_it_went(tenant, receiver):
    job, client = monitored(tenant, "nightly"), Client()
    armed(job, chat_url=receiver.url)
    fire_now(job)
    ping(client, key_of(job), "3", body=b"<oops> & more")
    check()

    assert alerts.deliver_pending(db_now()) == 1

    [(method, path, headers, body)] = receiver.requests
    assert (method, path, headers["Content-Type"]) == ("POST", "/hook?x=1", "application/json")
    sent = json.loads(body)
    assert list(sent) == ["text"]
    assert sent["text"].startswith(":red_circle: *failed* ops/nightly: failed on attempt 1: checkin: failed with exit")
    alert = Alert.objects.get()
    assert alerts.where_sent(alert) == "Slack hook at 127.0.0.1"
    shown = client_for(tenant).get("/api/v1/alerts/").json()["results"][0]["delivery"]
    assert (shown["status"], shown["sent_to"]) == ("delivered", "Slack hook at 127.0.0.1")


def test_slack_text_is_escaped(tenant, receiver):
    job = monitored(tenant, "a-b")
    rule = armed(job, chat_url=receiver.url)
    alert = Alert.objects.create(
        rule=rule,
        job=job,
        tenant=tenant,
        kind=AlertKind.FAILED,
        dedup_key="x",
        message="<b> & </b>",
        raised_at=db_now(),
        next_delivery_at=db_now(),
    )

    alerts.deliver(alert.id, db_now())

    assert json.loads(receiver.requests[0][3])["text"].endswith("a-b: &lt;b&gt; &amp; &lt;/b&gt;")


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://169.254.169.254/latest", "a metadata address is not allowed"),
        ("ftp://hooks.example.com/x", "scheme"),
        ("x" * 2001, "at most 2000 characters"),
    ],
)
def test_a_bad_chat_url_is_refused_naming_the_field_and_nothing_is_written(tenant, url, message):
    job = monitored(tenant, "nightly")

    with pytest.raises(InvalidInput) as refused:
        alerts.rule_set(job, {"chat_url": url})
    response = client_for(tenant).patch(f"/api/v1/jobs/{job.id}/alerts/", {"chat_url": url}, format="json")

    assert refused.value.field == "chat_url" and message in refused.value.message
    assert response.status_code == 400 and response.json()["errors"][0]["field"] == "chat_url"
    assert not AlertRule.objects.exists()


def test_the_chat_hook_is_set_from_the_cli_and_the_api(tenant, receiver):
    job = monitored(tenant, "nightly")

    call_command("alerts", "set", "ops/nightly", "--on-failure", "--slack", receiver.url, stdout=open("/dev/null", "w"))
    assert AlertRule.objects.get(job=job).chat_url == receiver.url
    response = client_for(tenant).patch(f"/api/v1/jobs/{job.id}/alerts/", {"chat_url": ""}, format="json")

    assert response.status_code == 200 and response.json()["chat_url"] == ""
    assert AlertRule.objects.get(job=job).chat_url == ""
