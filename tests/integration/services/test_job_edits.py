"""The services behind the API: editing jobs and what an edit would do, backfills, bulk
actions by tag, replaying runs, tenant quotas at write time and API keys. The previews of a
schedule, which need no database: tests/unit/services/test_job_edits.py."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from scheduler_app import schedules, services
from scheduler_app.models import ApiKey, AuditEvent, Job, JobRun, RunState, Tenant, Trigger, db_now


def spec(**fields) -> services.JobSpec:
    fields.setdefault("name", "job")
    fields.setdefault("task_name", "scheduler_app.echo")
    return services.JobSpec(**fields)


def snapshot(job: Job) -> dict:
    return {field.attname: getattr(job, field.attname) for field in Job._meta.concrete_fields}


# --- job_update --------------------------------------------------------------------------


def test_an_edit_of_the_schedule_bumps_the_version_moves_the_next_fire_and_audits_a_diff(tenant):
    job = services.job_create(tenant, spec(cron="0 3 * * *", timezone="Europe/Paris"))
    version = job.version

    edited = services.job_update(job, {"cron": "30 4 * * *"}, actor="test")

    assert edited.version == version + 1
    assert edited.cron == "30 4 * * *" and edited.timezone == "Europe/Paris"
    assert edited.next_run_at == schedules.next_fire_after(edited.schedule, db_now())
    event = AuditEvent.objects.get(job_id=job.id, action="job.updated")
    assert event.detail["changes"]["cron"] == ["0 3 * * *", "30 4 * * *"]
    assert "next_run_at" not in event.detail["changes"]


def test_giving_another_schedule_kind_replaces_the_schedule(tenant):
    job = services.job_create(tenant, spec(cron="0 3 * * *"))

    edited = services.job_update(job, {"every": 600})

    assert (edited.cron, edited.every_seconds, edited.run_at) == ("", 600, None)
    assert edited.anchor_at is not None
    assert db_now() < edited.next_run_at <= db_now() + timedelta(seconds=601)


def test_an_edit_that_leaves_the_schedule_alone_keeps_the_next_fire_and_the_interval_anchor(tenant):
    job = services.job_create(tenant, spec(every=300))
    Job.objects.filter(id=job.id).update(next_run_at=datetime(2030, 1, 1, tzinfo=UTC))
    job.refresh_from_db()

    edited = services.job_update(job, {"name": "renamed", "tags": ["nightly"], "max_attempts": 5})

    assert (edited.name, edited.tags, edited.max_attempts) == ("renamed", ["nightly"], 5)
    assert edited.next_run_at == datetime(2030, 1, 1, tzinfo=UTC)
    assert edited.anchor_at == job.anchor_at


def test_an_edit_that_changes_nothing_writes_nothing(tenant):
    job = services.job_create(tenant, spec(every=300))
    version = job.version

    assert services.job_update(job, {"every": 300, "name": "job"}).version == version
    assert not AuditEvent.objects.filter(action="job.updated").exists()


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"cron": "61 * * * *"}, "cron"),
        ({"every": 0}, "every"),
        ({"timezone": "Mars/Olympus"}, "timezone"),
        ({"name": ""}, "name"),
        ({"name": "taken"}, "name"),
        ({"task_name": "os.system"}, "task"),
        ({"target_kind": "http", "http": {"url": "ftp://example.com/"}}, "http.url"),
        ({"tags": ["ok", "bad\x00"]}, "tags.1"),
        ({"priority": 10}, "priority"),
        ({"priority": -1}, "priority"),
        ({"bogus": 3}, "bogus"),
        ({"at": datetime(2001, 1, 1, tzinfo=UTC)}, "at"),
        ({"end_at": datetime(2001, 1, 1, tzinfo=UTC)}, "end_at"),
        ({"end_at": datetime(2001, 1, 1, tzinfo=UTC), "name": "renamed"}, "end_at"),
    ],
)
def test_a_bad_edit_names_the_field_and_changes_nothing(tenant, changes, field):
    services.job_create(tenant, spec(name="taken", every=60))
    job = services.job_create(tenant, spec(every=300))
    before = snapshot(job)

    with pytest.raises(services.InvalidInput) as caught:
        services.job_update(job, changes)

    assert caught.value.field == field
    job.refresh_from_db()
    assert snapshot(job) == before
    assert not AuditEvent.objects.filter(action="job.updated").exists()


def test_an_edit_can_change_the_target_kind(tenant, settings):
    settings.CRONFLEET_HTTP_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    job = services.job_create(tenant, spec(every=300))

    edited = services.job_update(job, {"target_kind": "http", "http": {"url": "http://127.0.0.1:9/hook"}})

    assert edited.target_kind == "http" and edited.task_name == ""
    assert edited.target_config["url"] == "http://127.0.0.1:9/hook"


# --- impact ------------------------------------------------------------------------------


def test_impact_shows_the_fires_an_edit_moves_and_drops_without_saving(tenant):
    job = services.job_create(tenant, spec(cron="0 * * * *"))
    before = snapshot(job)

    impact = services.job_update_impact(job, {"cron": "0 */2 * * *"}, count=4)

    assert impact["next_before"] == services.upcoming_fires(job.schedule, job.next_run_at, 4)
    assert all(at.hour % 2 == 0 for at in impact["next_after"])
    dropped = [entry["at"] for entry in impact["skipped"]]
    assert dropped and all(at.hour % 2 == 1 for at in dropped)
    assert all(entry["reason"] == "no longer a fire time after the edit" for entry in impact["skipped"])
    assert impact["fires_now"] == []
    job.refresh_from_db()
    assert snapshot(job) == before


def test_impact_of_a_one_off_in_the_recent_past_fires_at_once(tenant):
    job = services.job_create(tenant, spec(cron="0 0 1 1 *"))
    soon_past = db_now() - timedelta(minutes=1)

    impact = services.job_update_impact(job, {"at": soon_past})

    assert impact["fires_now"] == [soon_past]
    assert impact["next_after"] == [soon_past]


def test_impact_of_an_edit_that_keeps_the_schedule_moves_nothing(tenant):
    job = services.job_create(tenant, spec(every=60))

    impact = services.job_update_impact(job, {"name": "other"}, count=3)

    assert impact["next_before"] == impact["next_after"] and len(impact["next_after"]) == 3
    assert impact["changes"] == {"name": ["job", "other"]}


# --- backfill ----------------------------------------------------------------------------


def test_backfill_dry_run_lists_the_fires_then_the_real_one_records_only_the_missing(tenant):
    job = services.job_create(tenant, spec(cron="0 * * * *"))
    end = db_now().replace(minute=0, second=0, microsecond=0) - timedelta(hours=1)
    start = end - timedelta(hours=4)
    JobRun.objects.create(
        job=job, tenant=tenant, scheduled_at=start + timedelta(hours=1), state=RunState.SUCCEEDED, created_at=end
    )

    dry = services.job_backfill(job, start=start, end=end, dry_run=True)

    assert dry["fires"] == [start + timedelta(hours=h) for h in range(5)]
    assert (dry["existing"], dry["created"], len(dry["missing"])) == (1, 0, 4)
    assert JobRun.objects.filter(job=job).count() == 1

    real = services.job_backfill(job, start=start, end=end, dry_run=False, actor="test")

    assert (real["existing"], real["created"]) == (1, 4)
    runs = JobRun.objects.filter(job=job, trigger=Trigger.BACKFILL)
    assert sorted(runs.values_list("scheduled_at", flat=True)) == real["missing"]
    assert set(runs.values_list("state", flat=True)) == {RunState.QUEUED}
    assert all(run.dispatched_at is not None for run in runs)
    again = services.job_backfill(job, start=start, end=end, dry_run=False)
    assert (again["existing"], again["created"]) == (5, 0)


@pytest.mark.parametrize(
    ("shift", "field"),
    [
        ({"start": timedelta(hours=-1), "end": timedelta(hours=-2)}, "end"),
        ({"start": timedelta(hours=-1), "end": timedelta(hours=1)}, "end"),
        ({"start": timedelta(days=-3), "end": timedelta(hours=-1)}, "end"),  # > 1,000 minutely fires
    ],
)
def test_backfill_refuses_a_bad_range(tenant, shift, field):
    job = services.job_create(tenant, spec(cron="* * * * *"))
    now = db_now()

    with pytest.raises(services.InvalidInput) as caught:
        services.job_backfill(job, start=now + shift["start"], end=now + shift["end"], dry_run=False)

    assert caught.value.field == field
    assert not JobRun.objects.exists()


# --- bulk by tag -------------------------------------------------------------------------


def test_bulk_pause_resume_and_delete_touch_only_the_tagged_jobs_of_the_tenant(tenant):
    other = services.tenant_create(slug="other-tenant")
    tagged = [services.job_create(tenant, spec(name=f"n{i}", every=60, tags=["nightly"])) for i in range(3)]
    untagged = services.job_create(tenant, spec(name="day", every=60, tags=["daily"]))
    foreign = services.job_create(other, spec(name="n0", every=60, tags=["nightly"]))

    assert services.jobs_bulk(tenant, tag="nightly", action="pause", note="freeze").count == 3
    assert set(Job.objects.filter(enabled=False).values_list("id", flat=True)) == {job.id for job in tagged}
    assert set(Job.objects.filter(enabled=False).values_list("paused_note", flat=True)) == {"freeze"}
    assert services.jobs_bulk(tenant, tag="nightly", action="pause").count == 0  # already paused

    assert services.jobs_bulk(tenant, tag="nightly", action="resume").count == 3
    assert not Job.objects.filter(enabled=False).exists()

    assert services.jobs_bulk(tenant, tag="nightly", action="delete", actor="test").count == 3
    assert set(Job.objects.values_list("id", flat=True)) == {untagged.id, foreign.id}
    assert AuditEvent.objects.filter(action="job.deleted", detail__tag="nightly").count() == 3


def test_bulk_refuses_an_unknown_action(tenant):
    with pytest.raises(services.InvalidInput) as caught:
        services.jobs_bulk(tenant, tag="x", action="explode")
    assert caught.value.field == "action"


# --- replay ------------------------------------------------------------------------------


def test_replay_queues_a_dead_run_as_its_next_attempt_and_keeps_the_old_error_in_the_audit(make_run):
    run = make_run(state=RunState.DEAD, attempt=3, error="boom", finished_at=db_now())

    replayed = services.run_replay(run, actor="test")

    assert (replayed.state, replayed.attempt, replayed.error, replayed.finished_at) == ("queued", 4, "", None)
    event = AuditEvent.objects.get(run_id=run.id, action="run.replayed")
    assert event.detail == {"attempt": 4, "was": "dead", "error": "boom"}


@pytest.mark.parametrize("state", [RunState.QUEUED, RunState.RUNNING, RunState.SUCCEEDED, RunState.SKIPPED])
def test_replay_refuses_a_run_that_is_not_failed_or_dead(make_run, state):
    run = make_run(state=state)
    with pytest.raises(services.InvalidInput) as caught:
        services.run_replay(run)
    assert caught.value.field == "state"
    run.refresh_from_db()
    assert (run.state, run.attempt) == (state, 1)


# --- quotas at write time ----------------------------------------------------------------


def test_max_jobs_refuses_the_job_over_the_quota(tenant):
    services.tenant_update(tenant, {"max_jobs": 2})
    services.job_create(tenant, spec(name="a", every=60))
    services.job_create(tenant, spec(name="b", every=60))

    with pytest.raises(services.QuotaExceeded) as caught:
        services.job_create(tenant, spec(name="c", every=60))

    assert "max_jobs" in caught.value.message
    assert Job.objects.filter(tenant=tenant).count() == 2


@pytest.mark.parametrize(
    ("fields", "field"),
    [({"every": 30}, "every"), ({"cron": "*/5 * * * *"}, "cron"), ({"cron": "0,1 * * * *"}, "cron")],
)
def test_min_interval_refuses_schedules_that_fire_too_often(tenant, fields, field):
    services.tenant_update(tenant, {"min_interval_seconds": 600})

    with pytest.raises(services.QuotaExceeded) as caught:
        services.job_create(tenant, spec(**fields))

    assert caught.value.field == field and "min_interval_seconds" in caught.value.message
    assert not Job.objects.exists()


def test_min_interval_applies_to_edits_of_the_schedule_only(tenant):
    job = services.job_create(tenant, spec(every=60))
    services.tenant_update(tenant, {"min_interval_seconds": 600})

    assert services.job_update(job, {"name": "renamed"}).name == "renamed"  # not re-checked
    with pytest.raises(services.QuotaExceeded):
        services.job_update(job, {"every": 120})
    assert services.job_update(job, {"cron": "*/15 * * * *"}).cron == "*/15 * * * *"


def test_tenant_update_checks_each_field(tenant):
    for changes, field in [
        ({"weight": 0}, "weight"),
        ({"max_jobs": -1}, "max_jobs"),
        ({"timezone": "Nowhere"}, "timezone"),
        ({"is_active": "yes"}, "is_active"),
        ({"slug": "x"}, "slug"),
        ({"weight": None}, "weight"),
    ]:
        with pytest.raises(services.InvalidInput) as caught:
            services.tenant_update(tenant, changes)
        assert caught.value.field == field
    tenant = services.tenant_update(tenant, {"max_fires_per_minute": 10, "weight": 3, "max_jobs": None}, actor="t")
    assert (tenant.max_fires_per_minute, tenant.weight, tenant.max_jobs) == (10, 3, None)
    assert AuditEvent.objects.get(action="tenant.updated").detail == {
        "changes": {"max_fires_per_minute": [None, 10], "weight": [1, 3]}
    }


# --- API keys ----------------------------------------------------------------------------


def test_a_key_is_shown_once_stored_as_a_hash_and_works_until_revoked(tenant):
    key, raw = services.apikey_create(tenant=tenant, name="ci")

    assert raw.startswith(f"cf_{key.prefix}_") and raw not in key.key_hash
    assert ApiKey.objects.filter(key_hash__contains=raw.split("_", 2)[2]).count() == 0
    found = services.apikey_authenticate(raw)
    assert found == key and found.last_used_at is not None

    services.apikey_revoke(key, actor="test")

    assert services.apikey_authenticate(raw) is None
    assert list(AuditEvent.objects.filter(tenant=tenant).values_list("action", flat=True)) == [
        "apikey.revoked",
        "apikey.created",
    ]


@pytest.mark.parametrize(
    "mangle",
    [
        lambda raw: raw[:-1] + ("A" if raw[-1] != "A" else "B"),  # right prefix, wrong secret
        lambda raw: raw.replace("cf_", "cx_"),
        lambda raw: raw + " ",
        lambda raw: "",
        lambda raw: "cf_000000000000_" + "a" * 32,  # unknown prefix
    ],
)
def test_a_wrong_key_authenticates_nobody(tenant, mangle):
    _, raw = services.apikey_create(tenant=tenant, name="ci")
    assert services.apikey_authenticate(mangle(raw)) is None


def test_keys_of_an_inactive_tenant_stop_working(tenant):
    _, raw = services.apikey_create(tenant=tenant, name="ci")
    services.tenant_update(tenant, {"is_active": False})
    assert services.apikey_authenticate(raw) is None


def test_apikeys_command_adds_lists_and_revokes(tenant):
    out = io.StringIO()
    call_command("apikeys", "add", "--tenant", tenant.slug, "--name", "deploy", stdout=out)
    raw = out.getvalue().strip().splitlines()[-1]
    key = services.apikey_authenticate(raw)
    assert key is not None and key.tenant == tenant and key.name == "deploy"

    out = io.StringIO()
    call_command("apikeys", "list", "--tenant", tenant.slug, stdout=out)
    assert key.prefix in out.getvalue() and raw not in out.getvalue()

    call_command("apikeys", "revoke", key.prefix, stdout=io.StringIO())
    assert services.apikey_authenticate(raw) is None

    with pytest.raises(CommandError, match="apikeys add: tenant: no tenant 'nope'"):
        call_command("apikeys", "add", "--tenant", "nope", stdout=io.StringIO())


def test_apikeys_add_refuses_a_name_with_a_hidden_line_break(tenant):
    with pytest.raises(CommandError, match="^apikeys add: name: must not contain the character U[+]2028"):
        call_command("apikeys", "add", "--tenant", tenant.slug, "--name", "deploy\u2028admin", stdout=io.StringIO())

    assert not ApiKey.objects.exists()


def test_a_tenant_may_hold_twenty_unrevoked_keys_by_default_and_staff_keys_are_not_counted(tenant, settings):
    assert settings.CRONFLEET_MAX_API_KEYS_PER_TENANT == 20  # the default
    keys = [services.apikey_create(tenant=tenant, name=f"k{n}")[0] for n in range(20)]
    services.apikey_create(tenant=None, name="staff")

    with pytest.raises(services.QuotaExceeded) as caught:
        services.apikey_create(tenant=tenant, name="k20")
    services.apikey_revoke(keys[0])
    services.apikey_create(tenant=tenant, name="k20")

    assert caught.value.field == "tenant" and "(20, CRONFLEET_MAX_API_KEYS_PER_TENANT)" in caught.value.message
    assert ApiKey.objects.filter(tenant=tenant, revoked_at__isnull=True).count() == 20
    assert AuditEvent.objects.filter(action="apikey.created").count() == 21


def test_apikeys_add_over_the_tenant_s_cap_names_the_setting_and_writes_nothing(tenant, settings):
    settings.CRONFLEET_MAX_API_KEYS_PER_TENANT = 1
    call_command("apikeys", "add", "--tenant", tenant.slug, stdout=io.StringIO())

    with pytest.raises(CommandError) as caught:
        call_command("apikeys", "add", "--tenant", tenant.slug, stdout=io.StringIO())

    assert str(caught.value) == (
        f"apikeys add: tenant: tenant {tenant.slug!r} already has the most unrevoked API "
        "keys allowed (1, CRONFLEET_MAX_API_KEYS_PER_TENANT); revoke one first"
    )
    assert caught.value.returncode == 2
    assert ApiKey.objects.count() == 1


def test_tenants_set_changes_quotas(tenant):
    out = io.StringIO()
    call_command(
        "tenants",
        "set",
        tenant.slug,
        "--max-fires-per-minute",
        "100",
        "--weight",
        "2",
        "--max-jobs",
        "none",
        stdout=out,
    )
    tenant = Tenant.objects.get(id=tenant.id)
    assert (tenant.max_fires_per_minute, tenant.weight, tenant.max_jobs) == (100, 2, None)
    with pytest.raises(CommandError, match="tenants set: weight: must be between 1 and 1000"):
        call_command("tenants", "set", tenant.slug, "--weight", "0", stdout=io.StringIO())


# --- dispatch quotas for runs made outside the beat -----------------------------------------


def test_a_manual_trigger_over_the_concurrency_quota_waits_as_pending(tenant):
    services.tenant_update(tenant, {"max_concurrent_runs": 1})
    job = services.job_create(tenant, spec(every=3600))

    first = services.job_trigger(job)
    second = services.job_trigger(job)

    assert (first.state, second.state) == (RunState.QUEUED, RunState.PENDING)
    assert first.dispatched_at is not None and second.dispatched_at is None
    assert second.reason.startswith("quota_concurrency:")


def test_a_backfill_queues_what_the_fires_per_minute_quota_allows_and_holds_the_rest(tenant):
    services.tenant_update(tenant, {"max_fires_per_minute": 2})
    job = services.job_create(tenant, spec(cron="0 * * * *"))
    end = db_now().replace(minute=0, second=0, microsecond=0) - timedelta(hours=1)

    result = services.job_backfill(job, start=end - timedelta(hours=4), end=end, dry_run=False)

    assert (result["created"], result["held"]) == (5, 3)
    states = list(JobRun.objects.filter(job=job).order_by("scheduled_at").values_list("state", flat=True))
    assert states == ["queued", "queued", "pending", "pending", "pending"]


def test_a_replay_over_the_quota_waits_as_pending(make_run, tenant):
    services.tenant_update(tenant, {"max_concurrent_runs": 1})
    make_run(state=RunState.RUNNING)
    dead = make_run(state=RunState.DEAD, scheduled_at=datetime(2024, 1, 2, tzinfo=UTC))

    replayed = services.run_replay(dead)

    assert (replayed.state, replayed.attempt) == (RunState.PENDING, 2)
    assert replayed.reason.startswith("quota_concurrency:")


def test_backfill_refuses_instants_before_1970(tenant):
    job = services.job_create(tenant, spec(cron="0 0 * * *"))
    with pytest.raises(services.InvalidInput) as caught:
        services.job_backfill(
            job, start=datetime(1, 1, 1, tzinfo=UTC), end=datetime(2000, 1, 1, tzinfo=UTC), dry_run=True
        )
    assert caught.value.field == "start"
