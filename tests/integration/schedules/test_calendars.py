"""Business-day calendars: the services (checks naming the field, edits moving next fires,
deletion refused while in use), the beat (skipped with the calendar's reason, moved later
or earlier, one query per turn for the batch's calendars), the API (CRUD in the caller's
tenant; another tenant's key cannot see or use a calendar) and the CLI. A real beat and
worker skipping a fire on a holiday and moving another: tests/system/schedules/test_calendars.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from rest_framework.test import APIClient

from scheduler_app import dispatch, schedules, services
from scheduler_app.dispatch.plan import batch_calendars
from scheduler_app.models import AuditEvent, Calendar, Job, JobRun, RunState, db_now

GRACE = timedelta(seconds=60)
ECHO = "scheduler_app.echo"
LONDON = "Europe/London"


def london(*args: int) -> datetime:
    return datetime(*args, tzinfo=schedules.zone(LONDON)).astimezone(UTC)


@pytest.fixture
def uk_bank(tenant) -> Calendar:
    return services.calendar_create(
        tenant, name="uk-bank", country="GB", subdivision="ENG", extra_holidays={"2026-12-24": "Office closed"}
    )


def calendar_job(make_job, calendar, policy, **fields) -> Job:
    fields.setdefault("cron", "0 9 * * *")
    return make_job(timezone=LONDON, calendar=calendar, calendar_policy=policy, **fields)


def dispatch_at(now: datetime):
    return dispatch.dispatch_due_jobs(now, limit=100, grace=GRACE)


# --- services -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "field", "says"),
    [
        ({"country": "XX"}, "country", "unknown country code 'XX'"),
        ({"country": "GB", "subdivision": "ZZZ"}, "subdivision", "known: ENG, NIR, SCT, WLS"),
        ({"subdivision": "ENG"}, "subdivision", "needs a country"),
        ({"weekdays": []}, "weekdays", "at least one"),
        ({"weekdays": ["mon", "someday"]}, "weekdays", "'someday' is not a weekday"),
        ({"extra_holidays": {"2026-13-01": "x"}}, "extra_holidays", "is not a date"),
        ({"extra_business_days": ["soon"]}, "extra_business_days", "is not a date"),
    ],
)
def test_calendar_create_refuses_bad_input_naming_the_field(tenant, fields, field, says):
    with pytest.raises(services.InvalidInput) as caught:
        services.calendar_create(tenant, name="bad", **fields)

    assert caught.value.field == field and says in caught.value.message
    assert not Calendar.objects.exists()


def test_calendar_create_normalises_codes_weekdays_and_dates(tenant):
    calendar = services.calendar_create(
        tenant,
        name="shop",
        country="de",
        subdivision="by",
        weekdays="mon-sat",
        extra_holidays=["2026-06-01"],
        extra_business_days=["2026-12-27"],
    )

    assert (calendar.country, calendar.subdivision, calendar.weekdays) == ("DE", "BY", "012345")
    assert calendar.extra_holidays == {"2026-06-01": ""}
    business = calendar.business_calendar(2026)
    assert business.reason(datetime(2026, 6, 1).date()).endswith("(extra holiday)")
    assert business.is_business_day(datetime(2026, 12, 27).date())  # a Sunday made a business day
    assert not business.is_business_day(datetime(2026, 1, 6).date())  # Epiphany in Bavaria
    assert AuditEvent.objects.filter(action="calendar.created", detail__calendar="shop").exists()


def test_a_second_calendar_of_one_name_in_a_tenant_is_refused_naming_the_field(uk_bank, tenant):
    with pytest.raises(services.InvalidInput) as caught:
        services.calendar_create(tenant, name="uk-bank")

    assert caught.value.field == "name"


def test_a_calendar_in_use_is_not_deleted_and_the_error_names_its_jobs(uk_bank, make_job):
    calendar_job(make_job, uk_bank, "skip", name="payroll")

    with pytest.raises(services.InvalidInput) as caught:
        services.calendar_delete(uk_bank)

    assert caught.value.field == "calendar" and "payroll" in caught.value.message
    Job.objects.all().delete()
    services.calendar_delete(uk_bank)
    assert not Calendar.objects.exists()


def test_a_job_cannot_use_another_tenants_calendar(uk_bank, make_job):
    other = services.tenant_create(slug="other", name="Other")

    with pytest.raises(services.InvalidInput) as caught:
        services.job_create(other, services.JobSpec(name="j", task_name=ECHO, cron="0 9 * * *", calendar="uk-bank"))

    assert caught.value.field == "calendar" and "has no calendar 'uk-bank'" in caught.value.message


def test_a_bad_calendar_policy_is_refused_naming_the_field(uk_bank, tenant):
    with pytest.raises(services.InvalidInput) as caught:
        services.job_create(
            tenant,
            services.JobSpec(
                name="j", task_name=ECHO, cron="0 9 * * *", calendar="uk-bank", calendar_policy="sometimes"
            ),
        )

    assert caught.value.field == "calendar_policy"


def test_job_create_computes_the_moved_next_fire_and_an_edit_keeps_the_calendar(uk_bank, tenant):
    job = services.job_create(
        tenant,
        services.JobSpec(
            name="payroll",
            task_name=ECHO,
            cron="0 18 31 * *",
            timezone=LONDON,
            calendar="uk-bank",
            calendar_policy="previous_business_day",
        ),
    )
    now = db_now()

    assert job.next_run_at == schedules.next_fire_after(job.schedule, now - timedelta(microseconds=1))
    assert job.schedule.calendar.name == "uk-bank"
    edited = services.job_update(job, {"description": "month end"})
    assert (edited.calendar_id, edited.calendar_policy) == (uk_bank.id, "previous_business_day")
    cleared = services.job_update(edited, {"calendar": ""})
    assert cleared.calendar_id is None


def test_an_edit_of_the_calendar_moves_its_jobs_next_fires(tenant, make_job):
    calendar = services.calendar_create(tenant, name="ops", weekdays="0123456")
    tomorrow = db_now().date() + timedelta(days=1)
    nine = datetime.combine(tomorrow, datetime.min.time(), tzinfo=UTC) + timedelta(hours=9)
    # Fires on tomorrow's day of the month only: tomorrow's fire is the job's next.
    job = make_job(
        cron=f"0 9 {tomorrow.day} * *", calendar=calendar, calendar_policy="next_business_day", next_run_at=nine
    )

    services.calendar_update(calendar, extra_holidays={tomorrow.isoformat(): "Inventory"})

    job.refresh_from_db()
    assert job.next_run_at == nine + timedelta(days=1)
    assert AuditEvent.objects.get(action="calendar.updated").detail["jobs_moved"] == 1


# --- the beat -------------------------------------------------------------------------------


def test_the_beat_records_a_fire_on_a_holiday_as_skipped_with_the_calendars_reason(uk_bank, make_job):
    job = calendar_job(make_job, uk_bank, "skip", next_run_at=london(2026, 12, 25, 9))

    dispatch_at(london(2026, 12, 25, 9, 0, 10))

    run = JobRun.objects.get(job=job)
    assert run.state == RunState.SKIPPED
    assert run.reason == "calendar: 2026-12-25 is not a business day in uk-bank (Christmas Day)"
    job.refresh_from_db()
    assert job.next_run_at == london(2026, 12, 26, 9)  # Boxing Day: the beat records that one too


def test_next_business_day_moves_christmas_to_the_29th_and_runs_it_once(uk_bank, make_job):
    # 24th: an extra holiday; 25th Christmas, 26th Boxing Day (a Saturday), 27th a Sunday,
    # 28th Boxing Day observed. All five fires run once, on Tuesday the 29th at 09:00.
    job = calendar_job(make_job, uk_bank, "next_business_day", next_run_at=london(2026, 12, 23, 9))

    dispatch_at(london(2026, 12, 23, 9, 0, 10))
    job.refresh_from_db()
    assert job.next_run_at == london(2026, 12, 29, 9)
    note = schedules.calendar_note(job.schedule, job.next_run_at)
    assert "2026-12-24 (Office closed)" in note and "2026-12-25 (Christmas Day)" in note
    dispatch_at(london(2026, 12, 29, 9, 0, 10))

    assert list(JobRun.objects.filter(job=job).order_by("scheduled_at").values_list("scheduled_at", "state")) == [
        (london(2026, 12, 23, 9), RunState.QUEUED),
        (london(2026, 12, 29, 9), RunState.QUEUED),
    ]


def test_previous_business_day_plans_the_saturday_month_end_on_friday_already(uk_bank, make_job):
    job = calendar_job(
        make_job, uk_bank, "previous_business_day", cron="0 18 31 * *", next_run_at=london(2025, 12, 31, 18)
    )

    dispatch_at(london(2025, 12, 31, 18, 0, 10))

    job.refresh_from_db()
    assert job.next_run_at == london(2026, 1, 30, 18)  # 31 January 2026 is a Saturday


def test_the_batchs_calendars_cost_one_query_and_jobs_without_one_none(
    uk_bank, tenant, make_job, django_assert_num_queries
):
    plain = make_job(cron="0 9 * * *")
    other = services.calendar_create(tenant, name="other")
    jobs = [
        calendar_job(make_job, uk_bank, "skip"),
        calendar_job(make_job, other, "skip"),
        calendar_job(make_job, uk_bank, "next_business_day"),
        plain,
    ]
    claimed = list(Job.objects.filter(id__in=[job.id for job in jobs]).values(*dispatch.claim.CLAIM_FIELDS))
    now = london(2026, 12, 25, 9)

    with django_assert_num_queries(0):
        assert batch_calendars([row for row in claimed if row["id"] == plain.id], now) == {}
    with django_assert_num_queries(1):
        found = batch_calendars(claimed, now)

    assert set(found) == {uk_bank.id, other.id}
    assert found[uk_bank.id] is uk_bank.business_calendar(2026)  # built once per version and year


# --- API ------------------------------------------------------------------------------------


def client_of(tenant) -> APIClient:
    _, raw = services.apikey_create(tenant=tenant, name="test key")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


def test_the_api_makes_lists_changes_and_deletes_a_calendar(tenant):
    api = client_of(tenant)

    made = api.post(
        "/api/v1/calendars/",
        {
            "name": "uk-bank",
            "country": "GB",
            "subdivision": "ENG",
            "weekdays": ["mon", "tue", "wed", "thu", "fri"],
            "extra_holidays": {"2026-12-24": "Office closed"},
        },
        format="json",
    )
    assert made.status_code == 201, made.json()
    assert made.json()["weekdays"] == [0, 1, 2, 3, 4] and made.json()["jobs"] == 0
    assert [c["name"] for c in api.get("/api/v1/calendars/").json()["results"]] == ["uk-bank"]
    url = f"/api/v1/calendars/{made.json()['id']}/"
    changed = api.patch(url, {"extra_business_days": ["2026-12-27"]}, format="json")
    assert changed.status_code == 200 and changed.json()["extra_business_days"] == ["2026-12-27"]
    job = api.post(
        "/api/v1/jobs/",
        {
            "name": "payroll",
            "schedule": {"cron": "0 18 31 * *", "timezone": LONDON},
            "target": {"kind": "task", "task": ECHO},
            "calendar": "uk-bank",
            "calendar_policy": "previous_business_day",
        },
        format="json",
    )
    assert job.status_code == 201, job.json()
    assert (job.json()["calendar"], job.json()["calendar_policy"]) == ("uk-bank", "previous_business_day")
    refused = api.delete(url)
    assert refused.status_code == 400 and refused.json()["errors"][0]["field"] == "calendar"
    api.delete(f"/api/v1/jobs/{job.json()['id']}/")
    assert api.delete(url).status_code == 204


def test_the_api_refuses_an_unknown_country_naming_the_field(tenant):
    response = client_of(tenant).post("/api/v1/calendars/", {"name": "x", "country": "XX"}, format="json")

    assert response.status_code == 400
    assert [error["field"] for error in response.json()["errors"]] == ["country"]


def test_another_tenants_key_cannot_see_change_or_use_a_calendar(uk_bank, tenant):
    other = services.tenant_create(slug="other", name="Other")
    api = client_of(other)

    assert api.get("/api/v1/calendars/").json()["results"] == []
    url = f"/api/v1/calendars/{uk_bank.id}/"
    assert api.get(url).status_code == 404
    assert api.patch(url, {"weekdays": [6]}, format="json").status_code == 404
    assert api.delete(url).status_code == 404
    used = api.post(
        "/api/v1/jobs/",
        {
            "name": "j",
            "schedule": {"cron": "0 9 * * *"},
            "target": {"kind": "task", "task": ECHO},
            "calendar": "uk-bank",
        },
        format="json",
    )
    assert used.status_code == 400 and used.json()["errors"][0]["field"] == "calendar"
    uk_bank.refresh_from_db()
    assert uk_bank.weekdays == "01234" and not Job.objects.exists()


def test_the_job_preview_shows_moved_fires_with_the_days_they_came_from(uk_bank, tenant, make_job):
    job = calendar_job(make_job, uk_bank, "next_business_day")
    fires = services.schedule_preview(job.schedule, count=3, after=london(2026, 12, 23, 10))

    assert [fire["utc"] for fire in fires] == [
        london(2026, 12, 29, 9),
        london(2026, 12, 30, 9),
        london(2026, 12, 31, 9),
    ]
    assert fires[0]["calendar"].startswith(
        "calendar: moved from 2026-12-24 (Office closed), 2026-12-25 (Christmas Day)"
    )
    assert fires[1]["calendar"] is None


# --- CLI ------------------------------------------------------------------------------------


def run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_the_cli_adds_lists_shows_and_deletes_calendars_and_jobs_use_them(tenant):
    added = run(
        "calendars",
        "add",
        "--tenant",
        tenant.slug,
        "--name",
        "uk-bank",
        "--country",
        "GB",
        "--subdivision",
        "ENG",
        "--holiday",
        "2026-12-24=Office closed",
    )
    assert "Created calendar" in added and "GB-ENG holidays" in added
    assert "uk-bank" in run("calendars", "list", "--tenant", tenant.slug)
    shown = run("calendars", "show", f"{tenant.slug}/uk-bank")
    assert "Christmas Day" in shown or "Office closed" in shown
    run(
        "jobs",
        "add",
        "--tenant",
        tenant.slug,
        "--name",
        "daily",
        "--cron",
        "0 9 * * *",
        "--timezone",
        LONDON,
        "--task",
        ECHO,
        "--calendar",
        "uk-bank",
        "--calendar-policy",
        "next_business_day",
    )
    job = Job.objects.get(name="daily")
    assert (job.calendar.name, job.calendar_policy) == ("uk-bank", "next_business_day")

    preview = run("jobs", "preview", str(job.id), "--start", "2026-12-23T12:00:00Z", "-n", "2")
    assert "moved from 2026-12-24 (Office closed)" in preview

    with pytest.raises(CommandError, match="calendar"):
        run("calendars", "delete", f"{tenant.slug}/uk-bank")
    run("jobs", "edit", str(job.id), "--calendar", "none", "--yes")
    job.refresh_from_db()
    assert job.calendar_id is None
    assert "Deleted" in run("calendars", "delete", f"{tenant.slug}/uk-bank")


def test_the_cli_refuses_an_unknown_subdivision_naming_it(tenant):
    with pytest.raises(CommandError, match="subdivision: unknown subdivision 'XYZ' of US"):
        run("calendars", "add", "--tenant", tenant.slug, "--name", "us", "--country", "US", "--subdivision", "XYZ")
