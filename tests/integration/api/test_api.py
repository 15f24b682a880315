"""The REST API's user journeys, through the whole Django stack (middleware, routing,
authentication, rate limiting in the real Redis) against the real PostgreSQL."""

from __future__ import annotations

import itertools
import sys
import time
from datetime import UTC, datetime, timedelta

import pytest
from rest_framework.test import APIClient

from scheduler_app import services
from scheduler_app.ledger import stats
from scheduler_app.models import (
    AuditEvent,
    Job,
    JobRun,
    RunState,
    Tenant,
    Trigger,
    db_now,
)
from tests.conftest import wait_for

_slugs = itertools.count()


def client_for(key_owner: Tenant | None, *, tenant_header: str | None = None) -> APIClient:
    """An API client holding a fresh key of `key_owner` (None: a staff key); .key is the ApiKey."""
    key, raw = services.apikey_create(tenant=key_owner, name="test key")
    client = APIClient()
    headers = {"HTTP_AUTHORIZATION": f"Bearer {raw}"}
    if tenant_header is not None:
        headers["HTTP_X_CRONFLEET_TENANT"] = tenant_header
    client.credentials(**headers)
    client.key, client.raw_key = key, raw
    return client


def make_tenant(**fields) -> Tenant:
    tenant = services.tenant_create(slug=f"api-{next(_slugs)}-{time.monotonic_ns() % 10**6}", name="API tenant")
    if fields:
        Tenant.objects.filter(id=tenant.id).update(**fields)
        tenant.refresh_from_db()
    return tenant


def job_body(**fields) -> dict:
    fields.setdefault("name", "job")
    fields.setdefault("schedule", {"every": 300})
    fields.setdefault("target", {"kind": "task", "task": "scheduler_app.echo"})
    return fields


def errors_of(response) -> dict[str, str]:
    """{field: message} of an error response (which must have the error shape)."""
    assert set(response.json()) == {"errors"}, response.json()
    return {error["field"]: error["message"] for error in response.json()["errors"]}


@pytest.fixture
def tenant(db) -> Tenant:
    return make_tenant()


@pytest.fixture
def api(tenant) -> APIClient:
    return client_for(tenant)


@pytest.fixture
def commands(settings, tmp_path):
    settings.CRONFLEET_COMMANDS = {
        "report": {
            "executable": sys.executable,
            "argv": ["-c", "print()", "{day}"],
            "params": {"day": {"type": "date"}},
        }
    }
    settings.CRONFLEET_COMMAND_CWD = str(tmp_path)


def create_job(api: APIClient, **fields) -> dict:
    response = api.post("/api/v1/jobs/", job_body(**fields), format="json")
    assert response.status_code == 201, response.json()
    return response.json()


# --- jobs ------------------------------------------------------------------------------


def test_jobs_of_every_schedule_and_target_kind_are_created_and_read_back(api, tenant, commands):
    at = (db_now() + timedelta(days=30)).replace(microsecond=0)

    cron = create_job(
        api,
        name="nightly",
        schedule={"cron": "0 3 * * *", "timezone": "Europe/Paris"},
        target={"kind": "task", "task": "scheduler_app.echo", "args": [1], "kwargs": {"x": "y"}},
        tags=["nightly", "billing"],
        max_attempts=5,
        priority=8,
    )
    every = create_job(
        api,
        name="ping",
        schedule={"every": 600},
        target={
            "kind": "http",
            "method": "PUT",
            "url": "https://hooks.example.com/cron",
            "headers": {"X-Team": "ops"},
            "body": '{"ping": true}',
        },
    )
    once = create_job(
        api,
        name="report",
        schedule={"at": at.isoformat()},
        target={"kind": "command", "name": "report", "params": {"day": "2024-01-31"}},
    )

    assert cron["schedule"] == {"cron": "0 3 * * *", "timezone": "Europe/Paris"}
    assert cron["target"] == {"kind": "task", "task": "scheduler_app.echo", "args": [1], "kwargs": {"x": "y"}}
    assert cron["tags"] == ["nightly", "billing"] and cron["max_attempts"] == 5 and cron["version"] == 1
    assert (cron["priority"], every["priority"]) == (8, 5)  # 5 unless given
    assert every["schedule"] == {"every": 600}
    assert every["target"] == {
        "kind": "http",
        "method": "PUT",
        "url": "https://hooks.example.com/cron",
        "headers": {"X-Team": "ops"},
        "body": '{"ping": true}',
    }
    assert once["schedule"] == {"at": at.strftime("%Y-%m-%dT%H:%M:%SZ")}
    assert once["next_run_at"] == once["schedule"]["at"]
    assert once["target"] == {"kind": "command", "name": "report", "params": {"day": "2024-01-31"}}
    assert api.get(f"/api/v1/jobs/{cron['id']}/").json() == cron
    listed = api.get("/api/v1/jobs/").json()
    assert [job["id"] for job in listed["results"]] == [cron["id"], every["id"], once["id"]]
    assert [job["name"] for job in api.get("/api/v1/jobs/?tag=billing").json()["results"]] == ["nightly"]
    assert [job["name"] for job in api.get("/api/v1/jobs/?name=ping").json()["results"]] == ["ping"]


def test_a_cron_job_without_a_zone_is_read_in_the_tenants_zone(db):
    api = client_for(make_tenant(timezone="America/New_York"))

    job = create_job(api, schedule={"cron": "0 9 * * *"})

    assert job["schedule"] == {"cron": "0 9 * * *", "timezone": "America/New_York"}


def test_patch_bumps_the_version_moves_the_next_fire_and_keeps_the_rest(api):
    job = create_job(api, schedule={"cron": "0 3 * * *", "timezone": "Europe/Paris"}, description="d")

    patched = api.patch(
        f"/api/v1/jobs/{job['id']}/", {"schedule": {"cron": "30 4 * * *"}, "name": "renamed"}, format="json"
    )

    assert patched.status_code == 200, patched.json()
    body = patched.json()
    assert body["version"] == job["version"] + 1
    assert body["schedule"] == {"cron": "30 4 * * *", "timezone": "Europe/Paris"}
    assert body["name"] == "renamed" and body["description"] == "d"
    reprioritised = api.patch(f"/api/v1/jobs/{job['id']}/", {"priority": 0}, format="json").json()
    assert (reprioritised["priority"], reprioritised["next_run_at"]) == (0, body["next_run_at"])
    assert body["next_run_at"] != job["next_run_at"]
    assert datetime.fromisoformat(body["next_run_at"]).astimezone(UTC).minute == 30
    switched = api.patch(f"/api/v1/jobs/{job['id']}/", {"schedule": {"every": 60}}, format="json").json()
    assert switched["schedule"] == {"every": 60} and switched["version"] == job["version"] + 3


def test_a_job_changed_to_monitored_gets_its_ping_url(api):
    job = create_job(api)

    response = api.patch(
        f"/api/v1/jobs/{job['id']}/", {"target": {"kind": "monitor", "grace_seconds": 60}}, format="json"
    )

    assert response.status_code == 200, response.json()
    target = response.json()["target"]
    assert (target["kind"], target["grace_seconds"]) == ("monitor", 60)
    assert target["ping_url"].startswith("http") and "/ping/" in target["ping_url"]
    assert api.get(f"/api/v1/jobs/{job['id']}/").json()["target"] == target


def test_impact_says_what_a_patch_would_do_and_saves_nothing(api):
    job = create_job(api, schedule={"cron": "0 3 * * *", "timezone": "UTC"})

    impact = api.post(f"/api/v1/jobs/{job['id']}/impact/", {"schedule": {"cron": "0 4 * * *"}}, format="json")

    assert impact.status_code == 200, impact.json()
    body = impact.json()
    assert len(body["next_before"]) == len(body["next_after"]) == 5
    assert all(at.endswith("T03:00:00Z") for at in body["next_before"])
    assert all(at.endswith("T04:00:00Z") for at in body["next_after"])
    assert body["changes"]["cron"] == ["0 3 * * *", "0 4 * * *"]
    assert body["fires_now"] == [] and body["paused"] is False
    assert api.get(f"/api/v1/jobs/{job['id']}/").json() == job


def test_preview_of_a_saved_job_flags_the_dst_gap(api):
    job = create_job(api, schedule={"cron": "30 2 * * *", "timezone": "Europe/Berlin"}, start_at="2099-03-27T00:00:00Z")

    response = api.get(f"/api/v1/jobs/{job['id']}/preview/?count=3")

    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["timezone"] == "Europe/Berlin"
    # 2099-03-29: Berlin springs forward at 02:00, so 02:30 does not exist that day. (A year
    # far ahead: previews start from the database's now.)
    assert [fire["local"] for fire in body["fires"]] == [
        "2099-03-27T02:30:00+01:00",
        "2099-03-28T02:30:00+01:00",
        "2099-03-29T03:00:00+02:00",
    ]
    assert [fire["utc"] for fire in body["fires"]] == [
        "2099-03-27T01:30:00Z",
        "2099-03-28T01:30:00Z",
        "2099-03-29T01:00:00Z",
    ]
    assert [fire["anomaly"] is not None for fire in body["fires"]] == [False, False, True]
    assert body["fires"][2]["anomaly"].startswith("dst_gap")


def test_preview_of_an_unsaved_schedule_flags_the_repeated_hour(api):
    response = api.post(
        "/api/v1/preview/",
        {
            "schedule": {"cron": "30 2 * * *", "timezone": "Europe/Berlin"},
            "count": 2,
            "start_at": "2099-10-24T12:00:00Z",
        },
        format="json",
    )

    assert response.status_code == 200, response.json()
    fires = response.json()["fires"]
    # 2099-10-25: Berlin falls back at 03:00, so 02:30 happens twice; the job fires once.
    assert [fire["local"] for fire in fires] == ["2099-10-25T02:30:00+02:00", "2099-10-26T02:30:00+01:00"]
    assert fires[0]["anomaly"].startswith("dst_repeated") and fires[1]["anomaly"] is None
    assert not Job.objects.exists()


def test_pause_and_resume(api):
    job = create_job(api)

    paused = api.post(f"/api/v1/jobs/{job['id']}/pause/", {"note": "maintenance"}, format="json").json()
    listed_paused = api.get("/api/v1/jobs/?enabled=false").json()["results"]
    resumed = api.post(f"/api/v1/jobs/{job['id']}/resume/").json()

    assert (paused["enabled"], paused["paused_note"]) == (False, "maintenance")
    assert [job["id"] for job in listed_paused] == [job["id"]]
    assert (resumed["enabled"], resumed["paused_note"]) == (True, "")
    assert resumed["version"] == job["version"] + 2


def test_bulk_pauses_resumes_and_deletes_by_tag(api):
    tagged = [create_job(api, name=f"t{n}", tags=["batch"])["id"] for n in range(3)]
    untouched = create_job(api, name="other", tags=["keep"])["id"]

    paused = api.post("/api/v1/jobs/bulk/", {"tag": "batch", "action": "pause", "note": "n"}, format="json").json()
    assert paused == {"tag": "batch", "action": "pause", "count": 3}
    assert not Job.objects.filter(id__in=tagged, enabled=True).exists()
    resumed = api.post("/api/v1/jobs/bulk/", {"tag": "batch", "action": "resume"}, format="json").json()
    assert resumed["count"] == 3 and Job.objects.filter(id__in=tagged, enabled=True).count() == 3
    deleted = api.post("/api/v1/jobs/bulk/", {"tag": "batch", "action": "delete"}, format="json").json()
    assert deleted["count"] == 3
    assert list(Job.objects.values_list("id", flat=True)) == [untouched]


def test_delete_removes_the_job(api):
    job = create_job(api)

    assert api.delete(f"/api/v1/jobs/{job['id']}/").status_code == 204

    assert api.get(f"/api/v1/jobs/{job['id']}/").status_code == 404
    assert not Job.objects.exists()


def test_backfill_dry_run_lists_the_missing_fires_and_the_real_one_records_them(api):
    job = create_job(api, schedule={"cron": "0 * * * *", "timezone": "UTC"})
    hour = db_now().replace(minute=0, second=0, microsecond=0)  # three fires, whatever the minute now
    body = {
        "start": (hour - timedelta(hours=3, minutes=30)).isoformat(),
        "end": (hour - timedelta(minutes=1)).isoformat(),
    }

    dry = api.post(f"/api/v1/jobs/{job['id']}/backfill/", body, format="json")
    real = api.post(f"/api/v1/jobs/{job['id']}/backfill/", {**body, "dry_run": False}, format="json")
    again = api.post(f"/api/v1/jobs/{job['id']}/backfill/", {**body, "dry_run": False}, format="json")

    assert dry.status_code == 200, dry.json()
    assert dry.json()["dry_run"] is True and dry.json()["created"] == 0
    assert len(dry.json()["fires"]) == 3 and dry.json()["missing"] == dry.json()["fires"]
    assert real.json()["created"] == 3 and real.json()["dry_run"] is False
    assert (again.json()["created"], again.json()["existing"]) == (0, 3)
    runs = api.get(f"/api/v1/runs/?job={job['id']}&trigger=backfill").json()["results"]
    assert sorted(run["scheduled_at"] for run in runs) == real.json()["fires"]


# --- runs ------------------------------------------------------------------------------


def test_trigger_records_a_manual_run_that_the_runs_list_shows(api, queue_name):
    job = create_job(api, queue=queue_name)

    triggered = api.post(f"/api/v1/jobs/{job['id']}/trigger/")

    assert triggered.status_code == 201, triggered.json()
    run = triggered.json()
    assert (run["job"], run["job_name"], run["trigger"], run["state"]) == (job["id"], "job", "manual", "queued")
    assert run["publish_error"] is None
    listed = api.get(f"/api/v1/runs/?job={job['id']}").json()["results"]
    assert [r["id"] for r in listed] == [run["id"]]
    assert JobRun.objects.get(id=run["id"]).trigger == Trigger.MANUAL


def add_runs(job: Job, count: int, start: datetime, **fields) -> list[JobRun]:
    return [
        JobRun.objects.create(
            job=job, tenant=job.tenant, scheduled_at=start + timedelta(minutes=n), created_at=start, **fields
        )
        for n in range(count)
    ]


def test_runs_pages_follow_the_cursor_without_repeats_or_gaps_while_new_runs_arrive(api, tenant):
    job = Job.objects.get(id=create_job(api)["id"])
    start = db_now() - timedelta(days=1)
    runs = add_runs(job, 7, start)
    # Two runs of one fire time (different jobs) exercise the id tie-break.
    other = Job.objects.get(id=create_job(api, name="other")["id"])
    runs += add_runs(other, 1, start + timedelta(minutes=3))
    expected = [run.id for run in sorted(runs, key=lambda run: (run.scheduled_at, run.id), reverse=True)]

    seen, url = [], "/api/v1/runs/?limit=3"
    while url:
        page = api.get(url).json()
        assert len(page["results"]) <= 3
        seen += [run["id"] for run in page["results"]]
        if len(seen) == 3:  # a newer run arrives between pages: it belongs before page 1
            add_runs(job, 1, start + timedelta(hours=1))
        url = page["next"]

    assert seen == expected


def test_runs_filters(api):
    job = Job.objects.get(id=create_job(api)["id"])
    other = Job.objects.get(id=create_job(api, name="other")["id"])
    start = datetime(2030, 1, 1, tzinfo=UTC)
    add_runs(job, 3, start, state=RunState.SUCCEEDED)
    dead = add_runs(job, 1, start + timedelta(hours=1), state=RunState.DEAD)
    add_runs(other, 2, start)

    def ids(query: str) -> list[int]:
        response = api.get(f"/api/v1/runs/?{query}")
        assert response.status_code == 200, response.json()
        return [run["id"] for run in response.json()["results"]]

    assert ids(f"job={job.id}&state=dead") == [dead[0].id]
    assert len(ids(f"job={job.id}")) == 4 and len(ids(f"job={other.id}")) == 2
    assert len(ids("scheduled_after=2030-01-01T00:00:00Z&scheduled_before=2030-01-01T00:02:00Z")) == 2
    assert len(ids("trigger=schedule&state=succeeded")) == 3
    assert ids("trigger=manual") == []


def test_a_run_shows_its_attempts_and_a_dead_run_is_replayed_as_its_next_attempt(api):
    job = Job.objects.get(id=create_job(api)["id"])
    [run] = add_runs(job, 1, db_now() - timedelta(hours=1), state=RunState.DEAD, attempt=3, error="boom", result="")
    JobRun.objects.filter(id=run.id).update(
        attempts=[
            {
                "attempt": n,
                "worker": "w1",
                "started_at": "2030-01-01T00:00:00+00:00",
                "finished_at": "2030-01-01T00:00:01+00:00",
                "outcome": outcome,
                "error": "boom",
            }
            for n, outcome in [(1, "retrying"), (2, "retrying"), (3, "dead")]
        ]
    )
    AuditEvent.objects.create(
        tenant=job.tenant,
        job=job,
        job_name=job.name,
        run_id=run.id,
        action="run.duplicate_delivery",
        actor="worker:w2",
        detail={"attempt": 3},
    )

    detail = api.get(f"/api/v1/runs/{run.id}/").json()
    replayed = api.post(f"/api/v1/runs/{run.id}/replay/")
    again = api.post(f"/api/v1/runs/{run.id}/replay/")

    assert (detail["state"], detail["attempt"], detail["error"]) == ("dead", 3, "boom")
    assert [(a["attempt"], a["outcome"], a["worker"]) for a in detail["attempts"]] == [
        (1, "retrying", "w1"),
        (2, "retrying", "w1"),
        (3, "dead", "w1"),
    ]
    assert [(event["action"], event["actor"]) for event in detail["events"]] == [
        ("run.duplicate_delivery", "worker:w2")
    ]
    assert replayed.status_code == 200, replayed.json()
    assert (replayed.json()["state"], replayed.json()["attempt"], replayed.json()["job_name"]) == ("queued", 4, "job")
    assert again.status_code == 400 and list(errors_of(again)) == ["state"]
    history = api.get(f"/api/v1/runs/{run.id}/").json()["events"]
    assert [event["action"] for event in history] == ["run.duplicate_delivery", "run.replayed"]
    assert history[1]["actor"] == f"api:{api.key.prefix}"


# --- stats -----------------------------------------------------------------------------


def scheduled_run(
    job: Job,
    scheduled_at: datetime,
    *,
    state: str,
    dispatch_lag: float | None = None,
    start_lag: float | None = None,
    trigger: str = Trigger.SCHEDULE,
) -> JobRun:
    def later(seconds):
        return None if seconds is None else scheduled_at + timedelta(seconds=seconds)

    return JobRun.objects.create(
        job=job,
        tenant=job.tenant,
        scheduled_at=scheduled_at,
        created_at=scheduled_at,
        state=state,
        trigger=trigger,
        dispatched_at=later(dispatch_lag),
        started_at=later(start_lag),
    )


def test_stats_count_states_and_measure_lags_and_the_failure_rate_over_the_window(api):
    job = Job.objects.get(id=create_job(api)["id"])
    now = db_now()
    for n in range(1, 11):  # dispatch lags 1..10 s, start lags 2..20 s
        state = RunState.SUCCEEDED if n <= 7 else (RunState.FAILED if n == 8 else RunState.DEAD)
        scheduled_run(job, now - timedelta(minutes=n), state=state, dispatch_lag=n, start_lag=2 * n)
    scheduled_run(
        job, now - timedelta(minutes=20), state=RunState.QUEUED, trigger=Trigger.BACKFILL, dispatch_lag=10_000
    )  # a backfill: counted, but no lag
    scheduled_run(job, now - timedelta(hours=3), state=RunState.DEAD, dispatch_lag=1)  # outside the window

    response = api.get("/api/v1/stats/?window=3600")

    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["window_seconds"] == 3600
    assert (
        body["counts"]["succeeded"],
        body["counts"]["failed"],
        body["counts"]["dead"],
        body["counts"]["queued"],
        body["total"],
    ) == (7, 1, 2, 1, 11)
    assert body["failure_rate"] == pytest.approx(3 / 10)
    assert body["dispatch_lag_seconds"] == {
        "count": 10,
        "p50": pytest.approx(5.5),
        "p95": pytest.approx(9.55),
        "p99": pytest.approx(9.91),
    }
    assert body["start_lag_seconds"]["p50"] == pytest.approx(11.0)


def test_stats_computed_in_python_match_postgresqls_percentile_cont(api):
    job = Job.objects.get(id=create_job(api)["id"])
    now = db_now()
    for n, lag in enumerate([0.25, 3.5, 1.0, 12.0, 0.5, 7.75, 2.0]):
        scheduled_run(
            job,
            now - timedelta(minutes=n + 1),
            state=RunState.SUCCEEDED,
            dispatch_lag=lag,
            start_lag=lag * 3 if n % 2 else None,
        )
    runs = JobRun.objects.filter(tenant=job.tenant, scheduled_at__gt=now - timedelta(hours=1), scheduled_at__lte=now)

    in_python = stats.lags_from_sample(runs)
    in_database = stats.lags_from_database(job.tenant_id, now - timedelta(hours=1), now)

    for python, database in zip(in_python, in_database):
        assert python["count"] == database["count"]
        for name in ("p50", "p95", "p99"):
            assert python[name] == pytest.approx(database[name])


def test_stats_with_no_runs_have_no_rates(api):
    body = api.get("/api/v1/stats/").json()

    assert body["total"] == 0 and body["failure_rate"] is None
    assert body["dispatch_lag_seconds"] == {"count": 0, "p50": None, "p95": None, "p99": None}


# --- rate limit ------------------------------------------------------------------------


def test_the_tenants_rate_limit_answers_429_with_retry_after(db):
    api = client_for(make_tenant(api_requests_per_minute=3))
    # Four requests must land in one one-minute window.
    wait_for(lambda: time.time() % 60 < 50, timeout=15, what="the start of a rate-limit window")

    answers = [api.get("/api/v1/me") for _ in range(3)]
    refused = api.get("/api/v1/me")

    assert [answer.status_code for answer in answers] == [200, 200, 200]
    assert [answer["RateLimit-Remaining"] for answer in answers] == ["2", "1", "0"]
    assert {answer["RateLimit-Limit"] for answer in answers} == {"3"}
    assert refused.status_code == 429
    assert 1 <= int(refused["Retry-After"]) <= 60
    assert (refused["RateLimit-Remaining"], refused["RateLimit-Reset"]) == ("0", refused["Retry-After"])
    assert list(errors_of(refused)) == ["rate_limit"]
    assert "more than 3 requests a minute" in errors_of(refused)["rate_limit"]
    assert client_for(make_tenant()).get("/api/v1/me").status_code == 200  # other keys are unaffected


def test_without_redis_rate_limiting_is_off_and_me_says_so(api, settings):
    settings.CRONFLEET_RATE_LIMIT_REDIS_URL = ""

    answer = api.get("/api/v1/me")

    assert answer.json()["rate_limit"]["enabled"] is False
    assert "RateLimit-Remaining" not in answer  # nothing counted, nothing claimed


def test_when_redis_does_not_answer_requests_go_through_and_a_warning_is_logged(db, settings, caplog):
    api = client_for(make_tenant(api_requests_per_minute=1))
    settings.CRONFLEET_RATE_LIMIT_REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there

    statuses = [api.get("/api/v1/me").status_code for _ in range(3)]

    assert statuses == [200, 200, 200]
    assert "API rate limiting is off for 5s: Redis did not answer" in caplog.text
