"""Importing django-celery-beat's schedules (scheduler_app.services.importbeat, manage.py import_beat)
with its real models on PostgreSQL and CELERY_BEAT_SCHEDULE entries from settings."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta
from unittest import mock
from zoneinfo import ZoneInfo

import pytest
from celery import current_app
from celery.schedules import crontab, schedule
from cronsim import CronSim
from django.conf import settings as django_settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db.models.functions import Now
from django.test import override_settings
from django_celery_beat.models import (
    ClockedSchedule,
    CrontabSchedule,
    IntervalSchedule,
    PeriodicTask,
    PeriodicTasks,
    SolarSchedule,
)
from django_celery_beat.tzcrontab import TzAwareCrontab

from scheduler_app import services
from scheduler_app.models import AuditEvent, Job, Node, NodeKind, Tenant, db_now
from scheduler_app.services import importbeat

TASK = "scheduler_app.echo"
pytestmark = pytest.mark.django_db


@pytest.fixture
def acme(db) -> Tenant:
    return services.tenant_create(slug="acme", timezone="Europe/Berlin")


def periodic(name: str, **fields) -> PeriodicTask:
    fields.setdefault("task", TASK)
    return PeriodicTask.objects.create(name=name, **fields)


def cron_row(name: str = "cron", zone: str = "UTC", row: dict | None = None, **fields) -> PeriodicTask:
    """A PeriodicTask on a crontab of `fields` in `zone`; `row` holds the PeriodicTask's own fields."""
    return periodic(name, crontab=CrontabSchedule.objects.create(timezone=ZoneInfo(zone), **fields), **(row or {}))


def interval_row(name: str, every: int, period: str, **fields) -> PeriodicTask:
    return periodic(name, interval=IntervalSchedule.objects.create(every=every, period=period), **fields)


def clocked_row(name: str, at: datetime, **fields) -> PeriodicTask:
    fields.setdefault("one_off", True)
    return periodic(name, clocked=ClockedSchedule.objects.create(clocked_time=at), **fields)


def import_(
    tenant: Tenant,
    *,
    dry_run: bool = False,
    disable_source: bool = False,
    from_db: bool = True,
    from_settings: bool = False,
) -> importbeat.Report:
    return importbeat.import_schedules(
        tenant, from_db=from_db, from_settings=from_settings, dry_run=dry_run, disable_source=disable_source
    )


def outcome(report: importbeat.Report, name: str) -> importbeat.Outcome:
    return next(found for found in report.outcomes if found.name == name)


def celery_fires(parsed: crontab, start: datetime, days: int) -> list[datetime]:
    """Every minute Celery's crontab matches in `days` days from `start` (wall time): month,
    day of month AND day of week must all match, as in celery.schedules.crontab."""
    fires = []
    for offset in range(days):
        day = start + timedelta(days=offset)
        if (
            day.month in parsed.month_of_year
            and day.day in parsed.day_of_month
            and day.isoweekday() % 7 in parsed.day_of_week
        ):
            fires += [day.replace(hour=h, minute=m) for h in sorted(parsed.hour) for m in sorted(parsed.minute)]
    return fires


def cron_fires(expression: str, start: datetime, days: int) -> list[datetime]:
    fires, end = [], start + timedelta(days=days)
    for fire in CronSim(expression, start - timedelta(minutes=1)):
        if fire >= end:
            return fires
        fires.append(fire)


# --- crontabs -------------------------------------------------------------------------


CRONTABS = [
    # (CrontabSchedule fields, the cron expression)
    (dict(minute="0", hour="3"), "0 3 * * *"),
    (dict(minute="*/15"), "*/15 * * * *"),
    (dict(minute="0,30", hour="9-17"), "0,30 9-17 * * *"),
    (dict(minute="1-59/2", hour="0"), "1-59/2 0 * * *"),
    (dict(minute="30", hour="8", day_of_week="mon-fri"), "30 8 * * 1-5"),
    (dict(minute="0", hour="10", day_of_week="sat,sunday"), "0 10 * * 0,6"),
    (dict(minute="0", hour="12", day_of_week="Mon,Wed,Fri"), "0 12 * * 1,3,5"),
    (dict(minute="0", hour="6", day_of_month="1", month_of_year="1,4,7,10"), "0 6 1 */3 *"),
    (dict(minute="0", hour="0", day_of_month="29", month_of_year="2"), "0 0 29 2 *"),  # leap days only
    (dict(minute="0", hour="0", day_of_month="1-31", month_of_year="jan"), "0 0 * 1 *"),
    # Celery needs both day fields to match; cron needs either, unless one starts with "*".
    (dict(minute="0", hour="9", day_of_month="1-7", day_of_week="mon"), "0 9 * * 1#1"),
    (dict(minute="0", hour="9", day_of_month="15-21", day_of_week="fri,sat"), "0 9 * * 5#3,6#3"),
    (dict(minute="0", hour="0", day_of_month="*/2", day_of_week="1"), "0 0 */2 * 1"),
    (dict(minute="0", hour="0", day_of_month="13", day_of_week="*/2"), "0 0 13 * */2"),
]


@pytest.mark.parametrize(("fields", "expected"), CRONTABS, ids=[case[1] for case in CRONTABS])
def test_a_crontab_row_becomes_a_cron_job_that_fires_when_celery_would(acme, fields, expected):
    row = cron_row("report", "Europe/Paris", **fields)

    report = import_(acme)

    job = Job.objects.get(name="report")
    assert (job.cron, job.timezone, job.task_name) == (expected, "Europe/Paris", TASK)
    assert outcome(report, "report").result == "imported"
    parsed = row.crontab.schedule
    start = datetime(2024, 1, 1)  # two years, one of them a leap year
    assert cron_fires(expected, start, 731) == celery_fires(parsed, start, 731)


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        (
            dict(day_of_month="1,15", day_of_week="mon"),
            "day_of_month 1,15 and day_of_week 1 are both set: Celery fires on days matching both, a cron expression "
            "on days matching either",
        ),
        (
            dict(minute="0", hour="0", day_of_month="31", month_of_year="2"),
            "day_of_month '31' never occurs in month_of_year '2'",
        ),  # an expression that never fires
        (dict(day_of_week="7"), "Invalid end range: 7 > 6. (django-celery-beat cannot run it either)"),
    ],
)
def test_a_crontab_no_cron_expression_can_say_is_refused_naming_the_row(acme, fields, reason):
    cron_row("odd", **fields)

    report = import_(acme)

    found = outcome(report, "odd")
    assert found.origin == f"PeriodicTask {PeriodicTask.objects.get().id}"
    assert found.result == "skipped" and reason in found.notes[0], found.notes
    assert not Job.objects.exists()


def test_a_crontab_without_a_zone_is_read_in_the_projects_zone_said_explicitly(acme):
    row = cron_row("zoneless", minute="0", hour="7")
    CrontabSchedule.objects.filter(id=row.crontab_id).update(timezone="")  # as an older row may hold

    with override_settings(CELERY_TIMEZONE="Asia/Tokyo"):
        report = import_(acme)

    job = Job.objects.get()
    assert (job.cron, job.timezone) == ("0 7 * * *", "Asia/Tokyo")
    assert outcome(report, "zoneless").notes == [
        "the crontab has no zone: django-celery-beat reads it in the project's zone, Asia/Tokyo (CELERY_TIMEZONE); "
        "the job says Asia/Tokyo"
    ]


def test_a_crontabs_zone_is_ignored_when_django_celery_beat_is_not_tz_aware(acme):
    cron_row("naive", "America/New_York", minute="0", hour="7")

    with override_settings(DJANGO_CELERY_BEAT_TZ_AWARE=False, CELERY_TIMEZONE=None, CELERY_ENABLE_UTC=True):
        report = import_(acme)

    assert Job.objects.get().timezone == "UTC"
    assert (
        outcome(report, "naive")
        .notes[0]
        .startswith(
            "DJANGO_CELERY_BEAT_TZ_AWARE is off: django-celery-beat reads it in the project's zone, UTC "
            "(CELERY_ENABLE_UTC without CELERY_TIMEZONE)"
        )
    )


# --- intervals, clocked, solar ----------------------------------------------------------


@pytest.mark.parametrize(
    ("every", "period", "seconds"),
    [
        (2, IntervalSchedule.DAYS, 172800),
        (3, IntervalSchedule.HOURS, 10800),
        (15, IntervalSchedule.MINUTES, 900),
        (45, IntervalSchedule.SECONDS, 45),
        (2_000_000, IntervalSchedule.MICROSECONDS, 2),
    ],
)
def test_an_interval_in_each_period_unit_becomes_an_anchored_interval(acme, every, period, seconds):
    interval_row("tick", every, period)
    before = db_now()

    import_(acme)

    job = Job.objects.get()
    assert job.every_seconds == seconds
    assert before - timedelta(seconds=1) <= job.anchor_at <= db_now()  # counted from the import
    assert job.next_run_at == job.anchor_at + timedelta(seconds=seconds)


def test_an_interval_that_is_not_whole_seconds_is_refused(acme):
    interval_row("fast", 500_000, IntervalSchedule.MICROSECONDS)

    report = import_(acme)

    assert outcome(report, "fast").notes == [
        "an interval of 0:00:00.500000 is not a whole number of seconds (the shortest is 1 s)"
    ]


def test_a_clocked_one_off_fires_once_at_its_time(acme):
    at = datetime(2031, 5, 4, 12, 30, 15, 250000, tzinfo=UTC)
    clocked_row("launch", at, kwargs='{"rocket": 1}')

    report = import_(acme)

    job = Job.objects.get()
    assert (job.run_at, job.next_run_at, job.cron, job.every_seconds, job.kwargs) == (at, at, "", None, {"rocket": 1})
    assert outcome(report, "launch").schedule == "once at 2031-05-04 12:30:15Z"


def test_a_clocked_one_off_whose_time_passed(acme):
    past = db_now() - timedelta(hours=3)
    clocked_row("missed", past)
    clocked_row("done", past, enabled=False)

    report = import_(acme)

    assert outcome(report, "done").notes == [
        f"a one-off whose time ({past.isoformat()}) has passed: nothing left to run"
    ]
    missed = Job.objects.get(name="missed")
    assert missed.run_at >= db_now() - timedelta(seconds=5)  # django-celery-beat would send it at once
    assert "has passed and it never ran" in outcome(report, "missed").notes[0]
    assert outcome(import_(acme), "missed").result == "unchanged"


def test_a_one_off_crontab_fires_once_at_the_schedules_next_fire(acme):
    cron_row("once", "Asia/Tokyo", row={"one_off": True}, minute="0", hour="9", day_of_month="1", month_of_year="6")

    report = import_(acme)

    job = Job.objects.get()
    fire = job.run_at.astimezone(ZoneInfo("Asia/Tokyo"))
    assert (fire.month, fire.day, fire.hour, job.cron) == (6, 1, 9, "")
    assert outcome(report, "once").notes[0].startswith("one_off: imported as a one-off at ")
    assert outcome(import_(acme), "once").result == "unchanged"


def test_a_solar_row_is_refused_naming_the_row_and_why(acme):
    solar = SolarSchedule.objects.create(event="sunrise", latitude="48.85", longitude="2.35")
    row = periodic("sunrise ping", solar=solar)

    report = import_(acme)

    found = outcome(report, "sunrise ping")
    assert (found.origin, found.result) == (f"PeriodicTask {row.id}", "skipped")
    assert found.notes[0].startswith(
        "solar schedule (sunrise at 48.850000, 2.350000): the event's time of day changes every day"
    )
    assert not Job.objects.exists()


# --- the other fields -------------------------------------------------------------------


def test_task_args_kwargs_queue_priority_start_and_expires_are_carried(acme):
    start = datetime(2030, 1, 1, tzinfo=UTC)
    expires = datetime(2031, 1, 1, tzinfo=UTC)
    cron_row(
        "full",
        row=dict(
            args='[1, "two"]',
            kwargs='{"k": {"n": null}}',
            queue="reports",
            priority=2,
            start_time=start,
            expires=expires,
            description="Nightly numbers",
        ),
        minute="0",
        hour="1",
    )

    report = import_(acme)

    job = Job.objects.get()
    assert (job.task_name, job.args, job.kwargs, job.queue) == (TASK, [1, "two"], {"k": {"n": None}}, "reports")
    assert job.priority == 7  # Redis serves 0 first; ours serves 9 first
    assert (job.start_at, job.end_at) == (start, expires - timedelta(microseconds=1))  # expires is exclusive
    assert job.next_run_at == datetime(2030, 1, 1, 1, 0, tzinfo=UTC)
    assert (job.max_attempts, job.tags) == (1, ["celery-beat"])
    assert (
        job.description == f"Imported from django-celery-beat PeriodicTask {PeriodicTask.objects.get().id}."
        "\n\nNightly numbers"
    )
    assert "priority 2 (on Redis 0 goes first) is 7 here (9 goes first)" in outcome(report, "full").notes


def test_priority_on_rabbitmq_keeps_its_order_capped_at_9(acme, monkeypatch):
    # The broker is the Celery app's (a host's app may load its conf under any namespace);
    # Celery reads CELERY_BROKER_URL from the environment before its conf.
    monkeypatch.setenv("CELERY_BROKER_URL", "amqp://guest:guest@127.0.0.1:5672//")
    monkeypatch.setitem(current_app.conf, "broker_url", "amqp://guest:guest@127.0.0.1:5672//")
    cron_row("high", row={"priority": 200}, minute="0")
    cron_row("low", row={"priority": 1}, minute="5")

    import_(acme)

    assert dict(Job.objects.values_list("name", "priority")) == {"high": 9, "low": 1}


def test_an_expired_row_is_skipped_and_a_disabled_one_is_imported_paused(acme):
    cron_row("old", row={"expires": db_now() - timedelta(days=1)}, minute="0")
    interval_row("off", 10, IntervalSchedule.MINUTES, enabled=False)

    report = import_(acme)

    assert outcome(report, "old").notes[0].startswith("expired at ")
    job = Job.objects.get()
    assert (job.name, job.enabled, job.paused_note) == ("off", False, "disabled in django-celery-beat when imported")
    assert "disabled in django-celery-beat: imported paused" in outcome(report, "off").notes


def test_a_task_that_is_not_allowed_is_refused_by_name_and_the_rest_is_imported(acme):
    cron_row("ours", minute="0")
    periodic(
        "theirs", task="billing.tasks.close_day", interval=IntervalSchedule.objects.create(every=1, period="hours")
    )

    report = import_(acme)

    assert outcome(report, "theirs").notes == ["task 'billing.tasks.close_day' is not in CRONFLEET_ALLOWED_TASKS"]
    assert list(Job.objects.values_list("name", flat=True)) == ["ours"]


def test_the_tenants_job_quota_is_obeyed_in_a_dry_run_too(acme):
    services.tenant_update(acme, {"max_jobs": 1})
    cron_row("first", minute="0")
    cron_row("second", minute="5")

    for dry_run in (True, False):
        report = import_(acme, dry_run=dry_run)
        assert [found.result for found in report.outcomes] == ["would import" if dry_run else "imported", "skipped"]
        assert "has reached its quota of 1 jobs" in outcome(report, "second").notes[0]


# --- idempotence, dry run, disabling the source -------------------------------------------


def sample_rows() -> None:
    cron_row("nightly", "Europe/Paris", minute="0", hour="3")
    interval_row("pulse", 30, IntervalSchedule.SECONDS)
    clocked_row("launch", datetime(2031, 1, 1, 9, tzinfo=UTC))
    cron_row("quarterly", row={"one_off": True}, minute="0", hour="6", day_of_month="1", month_of_year="1,4,7,10")
    periodic("theirs", task="other.task", crontab=CrontabSchedule.objects.create(minute="1"))


def test_a_second_import_changes_nothing(acme):
    sample_rows()
    first = import_(acme)
    jobs = list(Job.objects.order_by("id").values())
    events = AuditEvent.objects.count()

    second = import_(acme)

    assert [found.result for found in first.outcomes] == ["imported"] * 4 + ["skipped"]
    assert [found.result for found in second.outcomes] == ["unchanged"] * 4 + ["skipped"]
    assert list(Job.objects.order_by("id").values()) == jobs
    assert AuditEvent.objects.count() == events


def test_an_existing_job_that_differs_is_reported_and_never_overwritten(acme):
    cron_row("nightly", minute="0", hour="3")
    import_(acme)
    CrontabSchedule.objects.update(hour="4")

    report = import_(acme)

    assert outcome(report, "nightly").notes == [
        "a job named 'nightly' exists and differs (cron); not overwritten: change it with jobs edit, or delete it "
        "and import again"
    ]
    assert Job.objects.get().cron == "0 3 * * *"


def test_a_dry_run_writes_nothing(acme):
    sample_rows()
    changed = PeriodicTasks.last_change()

    report = import_(acme, dry_run=True, disable_source=True)

    assert [found.result for found in report.outcomes] == ["would import"] * 4 + ["skipped"]
    assert report.disabled == ["nightly", "pulse", "launch", "quarterly"]
    assert not Job.objects.exists() and not AuditEvent.objects.exists()
    assert PeriodicTask.objects.filter(enabled=True).count() == 5
    assert PeriodicTasks.last_change() == changed


def test_disable_source_turns_off_the_imported_rows_in_the_same_transaction(acme):
    sample_rows()
    changed = PeriodicTasks.last_change()

    report = import_(acme, disable_source=True)

    assert dict(PeriodicTask.objects.values_list("name", "enabled")) == {
        "nightly": False,
        "pulse": False,
        "launch": False,
        "quarterly": False,
        "theirs": True,
    }
    assert report.disabled == ["nightly", "pulse", "launch", "quarterly"]
    assert PeriodicTasks.last_change() > changed  # a running DatabaseScheduler rereads its rows
    assert "source row disabled" in outcome(report, "pulse").notes
    # Imported jobs are not paused by it, and a later import finds them unchanged.
    assert Job.objects.filter(enabled=True).count() == 4
    assert [found.result for found in import_(acme, disable_source=True).outcomes] == ["unchanged"] * 4 + ["skipped"]


def test_disable_source_and_the_jobs_commit_or_fail_together(acme):
    sample_rows()

    with mock.patch.object(PeriodicTasks, "update_changed", side_effect=RuntimeError("database went away")):
        with pytest.raises(RuntimeError):
            import_(acme, disable_source=True)

    assert not Job.objects.exists()
    assert PeriodicTask.objects.filter(enabled=True).count() == 5


# --- CELERY_BEAT_SCHEDULE ----------------------------------------------------------------


BEAT_SCHEDULE = {
    "settings-cron": {
        "task": TASK,
        "schedule": crontab(minute="15", hour="*/6", day_of_week="sat"),
        "kwargs": {"a": 1},
        "options": {"queue": "q1", "expires": 30},
    },
    "settings-zoned": {"task": TASK, "schedule": TzAwareCrontab(minute="0", hour="8", tz=ZoneInfo("Europe/Rome"))},
    "settings-schedule": {"task": TASK, "schedule": schedule(timedelta(minutes=5)), "args": (1, 2)},
    "settings-timedelta": {"task": TASK, "schedule": timedelta(hours=1)},
    "settings-number": {"task": TASK, "schedule": 90.0, "options": {"priority": 0}},
    "settings-theirs": {"task": "proj.tasks.other", "schedule": 60},
    "nightly": {"task": TASK, "schedule": crontab(minute="0", hour="3")},
}


@override_settings(CELERY_BEAT_SCHEDULE=BEAT_SCHEDULE, CELERY_TIMEZONE="America/Chicago")
def test_celery_beat_schedule_entries_become_jobs(acme):
    cron_row("nightly", minute="0", hour="3")  # the DatabaseScheduler copies settings entries into rows

    report = import_(acme, from_settings=True)

    jobs = {job.name: job for job in Job.objects.all()}
    assert (jobs["settings-cron"].cron, jobs["settings-cron"].timezone) == ("15 */6 * * 6", "America/Chicago")
    assert (jobs["settings-cron"].kwargs, jobs["settings-cron"].queue) == ({"a": 1}, "q1")
    assert (jobs["settings-zoned"].cron, jobs["settings-zoned"].timezone) == ("0 8 * * *", "Europe/Rome")
    assert (jobs["settings-schedule"].every_seconds, jobs["settings-schedule"].args) == (300, [1, 2])
    assert jobs["settings-timedelta"].every_seconds == 3600
    assert (jobs["settings-number"].every_seconds, jobs["settings-number"].priority) == (90, 9)
    assert "settings-theirs" not in jobs
    assert outcome(report, "settings-theirs").notes == ["task 'proj.tasks.other' is not in CRONFLEET_ALLOWED_TASKS"]
    assert outcome(report, "settings-cron").notes == [
        "a crontab in settings has no zone: Celery reads it in America/Chicago (CELERY_TIMEZONE); "
        "the job says America/Chicago",
        "options expires not carried over",
    ]
    from_settings = [found for found in report.outcomes if found.origin == "CELERY_BEAT_SCHEDULE"]
    assert outcome(report, "nightly").origin.startswith("PeriodicTask ")
    assert [found.result for found in from_settings if found.name == "nightly"] == ["skipped"]
    assert [found.notes for found in from_settings if found.name == "nightly"][0][0].startswith(
        "also a PeriodicTask of that name"
    )
    assert outcome(import_(acme, from_settings=True), "settings-number").result == "unchanged"


# --- the command --------------------------------------------------------------------------


def run(*argv: str) -> str:
    out = io.StringIO()
    call_command("import_beat", *argv, stdout=out)
    return out.getvalue()


def test_the_command_prints_the_report(acme):
    sample_rows()

    plain = run("--tenant", "acme", "--from-db", "--dry-run")
    dry = run("--tenant", "acme", "--from-db", "--dry-run", "--disable-source")
    real = run("--tenant", "acme", "--from-db", "--disable-source")
    again = run("--tenant", "acme", "--from-db")

    lines = real.splitlines()
    assert lines[0] == "Import into tenant acme from PeriodicTask rows:"
    assert lines[1].split() == ["source", "name", "result", "job", "schedule", "notes"]
    assert "4 imported, 0 unchanged, 1 skipped." in lines
    assert "PeriodicTask rows disabled: nightly, pulse, launch, quarterly." in lines
    assert "Differences in meaning from django-celery-beat:" in lines
    assert any(line.startswith("- intervals are anchored") for line in lines)
    assert "task 'other.task' is not in CRONFLEET_ALLOWED_TASKS" in real
    assert dry.splitlines()[0] == "Import into tenant acme from PeriodicTask rows (dry run: nothing written):"
    assert "4 would import, 0 unchanged, 1 skipped." in dry
    assert "PeriodicTask rows would be disabled: nightly, pulse, launch, quarterly." in dry
    assert "0 imported, 4 unchanged, 1 skipped." in again
    assert "Still enabled in django-celery-beat" not in real + again  # disabled by the real run
    assert (
        "Still enabled in django-celery-beat, so a running celery beat sends them too: nightly, pulse, launch, "
        "quarterly."
    ) in plain


def test_the_command_refuses_an_unknown_tenant_in_one_line(db):
    with pytest.raises(CommandError) as caught:
        run("--tenant", "nope")

    assert (str(caught.value), caught.value.returncode) == ("import_beat: tenant: no tenant 'nope'", 2)


def test_the_admin_does_not_offer_django_celery_beats_pages(admin_client):
    index = admin_client.get("/admin/")

    assert index.status_code == 200
    assert "django_celery_beat" not in index.content.decode()
    assert admin_client.get("/admin/django_celery_beat/periodictask/").status_code == 404


# --- issue 24 item 3: import_beat speaks up ------------------------------------------------


def run_both(*argv: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("import_beat", *argv, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


@override_settings(
    CELERY_BEAT_SCHEDULE=None, CELERYBEAT_SCHEDULE={"old-name": {"task": TASK, "schedule": timedelta(minutes=10)}}
)
def test_the_old_setting_name_celerybeat_schedule_is_imported(acme):
    out = run("--tenant", "acme", "--from-settings")

    assert Job.objects.get().every_seconds == 600
    assert outcome(import_(acme, from_db=False, from_settings=True), "old-name").origin == "CELERYBEAT_SCHEDULE"
    assert "(nothing to import" not in out and "1 imported, 0 unchanged, 0 skipped." in out


@override_settings(CELERY_BEAT_SCHEDULE={"both": {"task": TASK, "schedule": 60}})
def test_the_celery_apps_beat_schedule_is_imported_and_an_entry_read_twice_counts_once(acme):
    app_only = {
        "both": {"task": TASK, "schedule": 60},
        "app-only": {"task": TASK, "schedule": crontab(minute="7")},
        "clash": {"task": TASK, "schedule": 5},
    }
    with mock.patch.object(type(current_app.conf), "beat_schedule", app_only, create=True):
        with override_settings(CELERYBEAT_SCHEDULE={"clash": {"task": TASK, "schedule": 9}}):
            report = import_(acme, from_db=False, from_settings=True)

    assert [(found.origin, found.name, found.result) for found in report.outcomes] == [
        ("CELERY_BEAT_SCHEDULE", "both", "imported"),
        ("CELERYBEAT_SCHEDULE", "clash", "imported"),
        ("app.conf.beat_schedule", "app-only", "imported"),
        ("app.conf.beat_schedule", "clash", "skipped"),
    ]
    assert outcome(report, "app-only").schedule == "cron 7 * * * * (UTC)"
    assert report.outcomes[-1].notes == [
        "also in CELERYBEAT_SCHEDULE, with a different entry: imported from CELERYBEAT_SCHEDULE"
    ]


@override_settings(
    CELERY_BEAT_SCHEDULE={"clash": {"task": TASK, "schedule": 5}},
    CELERYBEAT_SCHEDULE={"clash": {"task": TASK, "schedule": 9}},
)
def test_a_name_in_two_places_does_not_stop_a_third_place_being_read(acme):
    app_only = {"app-only": {"task": TASK, "schedule": 60}}
    with mock.patch.object(type(current_app.conf), "beat_schedule", app_only, create=True):
        report = import_(acme, from_db=False, from_settings=True)

    assert [(found.origin, found.name, found.result) for found in report.outcomes] == [
        ("CELERY_BEAT_SCHEDULE", "clash", "imported"),
        ("CELERYBEAT_SCHEDULE", "clash", "skipped"),
        ("app.conf.beat_schedule", "app-only", "imported"),
    ]


@override_settings(CELERY_BEAT_SCHEDULE=None, CELERYBEAT_SCHEDULE=None)
def test_nothing_to_import_says_where_it_looked(acme):
    assert run("--tenant", "acme").splitlines()[1] == (
        "(nothing to import: read PeriodicTask rows, CELERY_BEAT_SCHEDULE, CELERYBEAT_SCHEDULE, "
        "app.conf.beat_schedule; all empty)"
    )


@override_settings(CELERYBEAT_SCHEDULE=["not", "a", "dict"])
def test_a_beat_schedule_that_is_not_a_dict_is_one_line_naming_it(acme):
    report = import_(acme, from_db=False, from_settings=True)

    assert [(found.origin, found.result, found.notes) for found in report.outcomes] == [
        ("CELERYBEAT_SCHEDULE", "skipped", ["CELERYBEAT_SCHEDULE: must be a dict of entries, not a list"])
    ]


def test_a_second_import_after_a_one_off_passed_reports_it_unchanged(acme):
    soon = db_now() + timedelta(seconds=2)
    clocked_row("soon", soon)
    past = db_now() - timedelta(hours=3)
    clocked_row("missed", past)
    first = import_(acme, disable_source=True)  # the rows are disabled now
    # Time passes: both clocked times are now well in the past, the rows disabled.
    later = db_now() + timedelta(hours=1)

    with mock.patch.object(importbeat, "db_now", return_value=later):
        second = import_(acme, disable_source=True)

    assert [found.result for found in first.outcomes] == ["imported", "imported"]
    assert [(found.name, found.result) for found in second.outcomes] == [("soon", "unchanged"), ("missed", "unchanged")]
    assert Job.objects.count() == 2
    missed = Job.objects.get(name="missed")
    assert outcome(second, "missed").schedule == f"once at {missed.run_at.astimezone(UTC):%Y-%m-%d %H:%M:%S}Z"


def test_a_task_not_allowed_still_shows_its_schedule_and_the_line_to_allow_it(acme):
    periodic(
        "theirs",
        task="billing.tasks.close_day",
        crontab=CrontabSchedule.objects.create(minute="30", hour="2", timezone=ZoneInfo("Europe/Paris")),
    )
    periodic(
        "again", task="billing.tasks.close_day", interval=IntervalSchedule.objects.create(every=5, period="minutes")
    )
    periodic("other", task="ops.tasks.rotate", interval=IntervalSchedule.objects.create(every=1, period="hours"))

    report = import_(acme, dry_run=True)
    out = run("--tenant", "acme", "--from-db")

    assert [(found.result, found.schedule) for found in report.outcomes] == [
        ("skipped", "cron 30 2 * * * (Europe/Paris)"),
        ("skipped", "every 300s"),
        ("skipped", "every 3600s"),
    ]
    assert outcome(report, "theirs").notes[0] == "task 'billing.tasks.close_day' is not in CRONFLEET_ALLOWED_TASKS"
    allowed = ",".join(django_settings.CRONFLEET_ALLOWED_TASKS)
    assert report.allow_line() == f"CRONFLEET_ALLOWED_TASKS={allowed},billing.tasks.close_day,ops.tasks.rotate"
    assert f"  CRONFLEET_ALLOWED_TASKS={allowed},billing.tasks.close_day,ops.tasks.rotate" in out.splitlines()
    assert "Tasks not allowed (billing.tasks.close_day, ops.tasks.rotate)" in out
    assert not Job.objects.exists()


def test_the_report_lists_the_queues_and_which_no_live_worker_consumes(acme, settings):
    default = settings.CELERY_TASK_DEFAULT_QUEUE
    Node.objects.create(
        kind=NodeKind.WORKER,
        name="w@default",
        host="h",
        pid=1,
        queues=[default],
        started_at=Now(),
        last_seen_at=db_now(),
        stale_after_seconds=15,
    )
    cron_row("a", minute="0")
    cron_row("b", minute="5")
    cron_row("c", row={"queue": "reports"}, minute="10")

    for argv in (("--dry-run",), ()):
        out, err = run_both("--tenant", "acme", "--from-db", *argv)

        assert f"Queues: {default} (2 jobs, 1 live worker); reports (1 job, NO live worker)." in out.splitlines()
        assert "No live worker consumes reports: their runs would wait there (see the warning on stderr)." in out
        assert "no live worker consumes queue 'reports'" in err and repr(default) not in err


@pytest.mark.parametrize("micro", [0, 250000])
@pytest.mark.parametrize("ahead", [timedelta(days=2), timedelta(minutes=20)])
def test_an_interval_with_a_future_start_time_fires_first_at_it_as_django_celery_beat_does(acme, ahead, micro):
    start = (db_now() + ahead).replace(microsecond=micro)  # start_time = timezone.now() + ... has microseconds
    interval_row("later", 1, IntervalSchedule.HOURS, start_time=start)

    report = import_(acme)

    job = Job.objects.get()
    # django-celery-beat: due as soon as start_time is reached (at the next whole second here).
    assert job.next_run_at == (start if not micro else start.replace(microsecond=0) + timedelta(seconds=1))
    assert outcome(report, "later").result == "imported"
    assert bool(micro) == any(note.startswith("start_time ") for note in outcome(report, "later").notes)
    assert outcome(import_(acme), "later").result == "unchanged"
