"""Alerts over the API: a job's rule (GET, PUT, PATCH, DELETE on /jobs/<id>/alerts/), the
alerts raised (/alerts/), their validation naming the field, tenant scoping and the audit
trail. The routes in the schema are tests/unit/api/test_alerts_api.py."""

from __future__ import annotations

from datetime import timedelta
from itertools import count

import pytest

from scheduler_app import alerts, services
from scheduler_app.models import Alert, AlertKind, AlertRule, AuditEvent, Job, RunState, db_now
from tests.integration.api.test_api import client_for, errors_of, make_tenant

_keys = count()


@pytest.fixture
def tenant(db):
    return make_tenant()


@pytest.fixture
def job(tenant) -> Job:
    return services.job_create(tenant, services.JobSpec(name="nightly", task_name="scheduler_app.echo", every=60))


@pytest.fixture
def api(tenant):
    return client_for(tenant)


def url(job: Job) -> str:
    return f"/api/v1/jobs/{job.id}/alerts/"


def raise_alert(
    job: Job, kind: str = AlertKind.FAILED, *, minutes_ago: float = 1, delivered: bool = False, **fields
) -> Alert:
    at = db_now() - timedelta(minutes=minutes_ago)
    return Alert.objects.create(
        rule=AlertRule.objects.filter(job=job).first(),
        job=job,
        tenant=job.tenant,
        kind=kind,
        dedup_key=f"test:{next(_keys)}",
        message=f"{job.name}: {kind}",
        raised_at=at,
        delivered_at=at if delivered else None,
        next_delivery_at=None if delivered else at,
        delivery_attempts=1 if delivered else 0,
        **fields,
    )


# --- the rule ------------------------------------------------------------------------------


def test_put_creates_the_rule_then_replaces_it_leaving_out_fields_to_their_defaults(api, job):
    created = api.put(
        url(job),
        {
            "no_success_seconds": 93600,
            "grace_seconds": 3600,
            "on_failure": True,
            "emails": ["ops@example.com"],
            "cooldown_seconds": 600,
        },
        format="json",
    )
    replaced = api.put(url(job), {"max_duration_seconds": 90.5}, format="json")

    assert created.status_code == 201, created.content
    assert created.json()["job"] == job.id and created.json()["job_name"] == "nightly"
    assert created.json()["emails"] == ["ops@example.com"] and created.json()["no_success_seconds"] == 93600
    assert replaced.status_code == 200, replaced.content
    body = replaced.json()
    assert {name: body[name] for name in alerts.RULE_FIELDS} == {**alerts.RULE_DEFAULTS, "max_duration_seconds": 90.5}
    assert api.get(url(job)).json() == body


def test_patch_changes_only_the_fields_given(api, job):
    api.put(url(job), {"on_failure": True, "webhook_url": "https://hooks.example.com/cron"}, format="json")

    response = api.patch(url(job), {"max_start_lag_seconds": 30, "enabled": False}, format="json")

    assert response.status_code == 200, response.content
    rule = AlertRule.objects.get(job=job)
    assert (rule.on_failure, rule.webhook_url, rule.max_start_lag_seconds, rule.enabled) == (
        True,
        "https://hooks.example.com/cron",
        30,
        False,
    )


def test_patch_makes_the_rule_when_the_job_has_none(api, job):
    response = api.patch(url(job), {"on_failure": True}, format="json")

    assert response.status_code == 201, response.content
    assert AlertRule.objects.get(job=job).cooldown_seconds == 3600


def test_get_and_delete_answer_404_when_the_job_has_no_rule(api, job):
    assert api.get(url(job)).status_code == 404
    assert errors_of(api.get(url(job))) == {"path": f"job {job.id} has no alert rule"}
    assert api.delete(url(job)).status_code == 404


def test_delete_removes_the_rule_and_keeps_its_alerts(api, job):
    api.put(url(job), {"on_failure": True}, format="json")
    raise_alert(job)

    response = api.delete(url(job))

    assert response.status_code == 204
    assert not AlertRule.objects.filter(job=job).exists() and Alert.objects.filter(job=job).count() == 1
    assert api.get(url(job)).status_code == 404


def test_every_change_is_in_the_audit_trail_with_the_key_as_actor(api, job):
    api.put(url(job), {"on_failure": True}, format="json")
    api.patch(url(job), {"cooldown_seconds": 60}, format="json")
    api.patch(url(job), {"cooldown_seconds": 60}, format="json")  # no change: nothing recorded
    api.delete(url(job))

    events = list(
        AuditEvent.objects.filter(job_id=job.id, action__startswith="job.alerts")
        .order_by("id")
        .values_list("action", "actor", "detail")
    )
    actor = f"api:{api.key.prefix}"
    assert [(action, who) for action, who, _ in events] == [
        ("job.alerts_set", actor),
        ("job.alerts_set", actor),
        ("job.alerts_deleted", actor),
    ]
    assert events[1][2] == {"changes": {"cooldown_seconds": [3600, 60]}}


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({"webhook_url": "file:///etc/passwd"}, "webhook_url", "scheme 'file' is not allowed"),
        ({"webhook_url": "http://user:secret@hooks.example.com/"}, "webhook_url", "credentials"),
        ({"webhook_url": "http://169.254.169.254/latest/meta-data"}, "webhook_url", "metadata address is not allowed"),
        ({"webhook_url": "http://127.0.0.1:8080/hook"}, "webhook_url", "loopback address is not allowed"),
        ({"webhook_url": "http://10.1.2.3/hook"}, "webhook_url", "private address is not allowed"),
        ({"emails": ["ops@example.com", "not an address"]}, "emails.1", "is not an e-mail address"),
        ({"emails": "ops@example.com"}, "emails", "list"),
        ({"grace_seconds": -1}, "grace_seconds", "greater than or equal to 0"),
        ({"max_duration_seconds": -5}, "max_duration_seconds", "greater than or equal to 0"),
        ({"max_duration_seconds": 0}, "max_duration_seconds", "between 0 and 366 days"),
        ({"no_success_seconds": 0}, "no_success_seconds", "greater than or equal to 1"),
        ({"no_success_seconds": "3600"}, "no_success_seconds", "must be a whole number"),
        ({"max_start_lag_seconds": "30"}, "max_start_lag_seconds", "must be a number of seconds"),
        ({"on_failure": "yes"}, "on_failure", "must be true or false"),
        ({"min_duration_seconds": 10, "max_duration_seconds": 5}, "min_duration_seconds", "below max_duration_seconds"),
        ({"cooldown_seconds": 366 * 86400 + 1}, "cooldown_seconds", "less than or equal to"),
        ({"cooldown_seconds": 0}, "cooldown_seconds", "must be at least 60 s (CRONFLEET_ALERT_MIN_COOLDOWN_SECONDS)"),
        (
            {"emails": [f"ops{i}@example.com" for i in range(11)]},
            "emails",
            "at most 10 addresses (CRONFLEET_ALERT_MAX_EMAILS_PER_RULE)",
        ),
        ({"job": 5}, "job", "is read-only"),
        ({"webhook": "https://hooks.example.com/"}, "webhook", "is not a known field"),
    ],
)
def test_bad_input_answers_400_naming_the_field(api, job, body, field, message):
    for method in ("put", "patch"):
        response = getattr(api, method)(url(job), body, format="json")

        assert response.status_code == 400, (method, response.content)
        errors = errors_of(response)
        assert list(errors) == [field] and message in errors[field], (method, errors)
    assert not AlertRule.objects.filter(job=job).exists()


def test_a_minimum_at_or_above_the_kept_maximum_is_refused(api, job):
    api.put(url(job), {"max_duration_seconds": 60}, format="json")

    response = api.patch(url(job), {"min_duration_seconds": 60}, format="json")

    assert response.status_code == 400
    assert errors_of(response) == {"min_duration_seconds": "must be below max_duration_seconds"}
    assert AlertRule.objects.get(job=job).min_duration_seconds is None


# --- the alerts raised ---------------------------------------------------------------------


def test_alerts_are_listed_newest_first_with_their_job_run_and_delivery(api, job, tenant):
    api.put(url(job), {"on_failure": True}, format="json")
    old = raise_alert(job, minutes_ago=30, delivered=True, run_id=41, suppressed=3)
    new = raise_alert(
        job, AlertKind.NO_SUCCESS, minutes_ago=5, delivery_log=[{"channel": "webhook", "at": "x", "error": "http 500"}]
    )
    Alert.objects.filter(id=new.id).update(delivery_attempts=alerts.DELIVERY_ATTEMPTS)

    rows = api.get("/api/v1/alerts/").json()["results"]

    assert [row["id"] for row in rows] == [new.id, old.id]
    assert rows[1] | {"raised_at": None, "delivery": None} == {
        "id": old.id,
        "kind": "failed",
        "message": "nightly: failed",
        "raised_at": None,
        "job": job.id,
        "job_ref": f"{tenant.slug}/nightly",
        "run_id": 41,
        "suppressed": 3,
        "detail": {},
        "delivery": None,
    }
    assert rows[1]["delivery"]["status"] == "delivered" and rows[1]["delivery"]["attempts"] == 1
    assert rows[0]["delivery"] | {"next_attempt_at": None} == {
        "status": "failed",
        "delivered_at": None,
        "attempts": alerts.DELIVERY_ATTEMPTS,
        "next_attempt_at": None,
        "last_error": "http 500",
        "sent_to": "webhook",
    }


def test_an_alert_over_the_tenant_s_hourly_budget_is_listed_as_suppressed_with_the_reason(api, job, tenant, settings):
    settings.CRONFLEET_ALERT_TENANT_ALERTS_PER_HOUR = 1
    other = services.job_create(tenant, services.JobSpec(name="other", task_name="scheduler_app.echo", every=60))
    now = db_now()
    for each in (job, other):
        api.put(url(each), {"on_failure": True}, format="json")
        AlertRule.objects.filter(job=each).update(checked_until=now - timedelta(hours=1), next_check_at=now)
        at = now - timedelta(minutes=10)
        each.runs.create(
            tenant=tenant,
            scheduled_at=at,
            state=RunState.FAILED,
            created_at=at,
            started_at=at,
            finished_at=at + timedelta(seconds=1),
        )
    assert alerts.evaluate_due_rules(now) == 2

    rows = api.get("/api/v1/alerts/").json()["results"]

    assert sorted(row["delivery"]["status"] for row in rows) == ["pending", "suppressed"]
    held = next(row["delivery"] for row in rows if row["delivery"]["status"] == "suppressed")
    assert held["next_attempt_at"] is None and "budget of 1 alerts per hour is spent" in held["last_error"]


def test_alerts_filter_by_job_kind_and_delivery_and_page_by_cursor(api, job, tenant):
    other = services.job_create(tenant, services.JobSpec(name="other", task_name="scheduler_app.echo", every=60))
    failed = raise_alert(job, minutes_ago=3, delivered=True)
    late = raise_alert(job, AlertKind.START_LAG, minutes_ago=2)
    elsewhere = raise_alert(other, minutes_ago=1)

    def ids(query: str) -> list[int]:
        response = api.get(f"/api/v1/alerts/?{query}")
        assert response.status_code == 200, response.content
        return [row["id"] for row in response.json()["results"]]

    assert ids(f"job={job.id}") == [late.id, failed.id]
    assert ids("kind=failed") == [elsewhere.id, failed.id]
    assert ids("delivered=true") == [failed.id]
    assert ids(f"delivered=false&job={job.id}") == [late.id]
    first = api.get("/api/v1/alerts/?limit=2").json()
    assert [row["id"] for row in first["results"]] == [elsewhere.id, late.id]
    assert [row["id"] for row in api.get(first["next"]).json()["results"]] == [failed.id]


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("kind=broken", "kind"),
        ("delivered=maybe", "delivered"),
        ("job=abc", "job"),
        ("state=failed", "state"),
        ("limit=0", "limit"),
    ],
)
def test_bad_list_filters_answer_400_naming_them(api, job, query, field):
    response = api.get(f"/api/v1/alerts/?{query}")

    assert response.status_code == 400
    assert list(errors_of(response)) == [field]


# --- tenants -------------------------------------------------------------------------------


def test_another_tenant_neither_sees_nor_sets_the_rule_or_the_alerts(api, job):
    api.put(url(job), {"on_failure": True, "emails": ["a@example.com"]}, format="json")
    raise_alert(job)
    b = client_for(make_tenant())

    responses = [
        b.get(url(job)),
        b.put(url(job), {"enabled": False}, format="json"),
        b.patch(url(job), {"emails": ["b@example.com"]}, format="json"),
        b.delete(url(job)),
    ]

    assert [response.status_code for response in responses] == [404] * 4
    assert all(errors_of(response) == {"id": "not found"} for response in responses)
    rule = AlertRule.objects.get(job=job)
    assert (rule.enabled, rule.emails) == (True, ["a@example.com"])
    assert b.get("/api/v1/alerts/").json()["results"] == []
    assert errors_of(b.get(f"/api/v1/alerts/?job={job.id}")) == {"job": "not found"}


def test_a_staff_key_acts_for_the_tenant_it_names(job, tenant):
    staff = client_for(None, tenant_header=tenant.slug)
    wrong = client_for(None, tenant_header=make_tenant().slug)
    raise_alert(job)

    response = staff.put(url(job), {"on_failure": True}, format="json")

    assert response.status_code == 201, response.content
    assert len(staff.get("/api/v1/alerts/").json()["results"]) == 1
    assert wrong.get(url(job)).status_code == 404
    assert wrong.get("/api/v1/alerts/").json()["results"] == []
    assert errors_of(client_for(None).get("/api/v1/alerts/")) == {
        "X-Cronfleet-Tenant": "staff callers name the tenant they act for (its slug) in this header"
    }
    assert AuditEvent.objects.get(action="job.alerts_set").actor == f"api:{staff.key.prefix}"
