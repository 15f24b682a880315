"""Flexible windows: a job that says "daily 01:00-03:00" (or "hourly") fires once in it, at the
minute where its scope's planned fires are fewest; the choice is stored as an ordinary cron
expression, so it is stable, follows the cron DST rules, and moves only when the job's own
window is edited or on `jobs rebalance`. Here on the database, through the services, the API,
the CLI and the bench; the windows and the choice alone are tests/unit/schedules/test_flexible_windows.py."""

from __future__ import annotations

import io
import math
import re
import threading
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError, OutputWrapper
from django.db import connection, connections

from bench import flexible
from scheduler_app import schedules, services
from scheduler_app.models import AuditEvent, Job, db_now
from tests.integration.api.test_api import client_for, errors_of, make_tenant
from tests.unit.schedules.test_flexible_windows import NOW

TASK = "scheduler_app.echo"


def add(tenant, name: str, window: str = "daily 01:00-03:00", **fields) -> Job:
    fields.setdefault("task_name", TASK)
    return services.job_create(tenant, services.JobSpec(name=name, flex_window=window, **fields))


def minute_of_day(job: Job) -> int:
    minute, hour = job.cron.split()[:2]
    return int(hour) * 60 + int(minute)


# --- placed through the services, on the database ---------------------------------------


@pytest.mark.django_db
def test_a_thousand_nightly_jobs_added_one_by_one_land_flat_across_the_window():
    tenant = make_tenant()
    jobs = [add(tenant, f"nightly-{n}") for n in range(1000)]

    per_minute = Counter(minute_of_day(job) for job in jobs)
    assert set(per_minute) <= set(range(60, 180))  # 01:00 .. 02:59
    assert max(per_minute.values()) <= math.ceil(1000 / 120)
    assert min(per_minute.values()) >= 1000 // 120
    assert all(
        job.next_run_at.astimezone(schedules.zone(job.timezone)).strftime("%H:%M")
        == f"{minute_of_day(job) // 60:02d}:{minute_of_day(job) % 60:02d}"
        for job in jobs[:20]
    )


@pytest.mark.django_db
def test_a_placement_avoids_the_minutes_fixed_time_jobs_already_fill():
    tenant = make_tenant()
    for n in range(5):
        services.job_create(tenant, services.JobSpec(name=f"fixed-{n}", cron="0 1 * * *", task_name=TASK))

    placed = [add(tenant, f"nightly-{n}", "daily 01:00-01:05") for n in range(16)]

    per_minute = Counter(minute_of_day(job) for job in placed)
    assert per_minute[60] == 0  # 01:00 holds five fixed jobs: the other minutes take four each first
    assert sorted(per_minute.values()) == [4, 4, 4, 4]
    note = placed[0].flex_note
    assert re.fullmatch(
        r"01:0[1-4] UTC, chosen in daily 01:00-01:05 on \d{4}-\d\d-\d\d: 0 planned fires in that "
        r"minute over the next 7 days, the fewest of the window's 5 minutes \(busiest: 35; "
        rf"tenant {tenant.slug}\)",
        note,
    ), note


@pytest.mark.django_db
def test_intervals_and_one_offs_count_as_load_too():
    tenant = services.tenant_create(slug="flex-load", name="Flex load")  # a fixed slug: a fixed tie-break
    begin = schedules.parse_window("daily 01:00-01:10").occurrences("UTC", db_now())[0][0]
    for minute in range(5):  # a one-off at each of 01:00-01:04 of the first day
        services.job_create(
            tenant, services.JobSpec(name=f"once-{minute}", at=begin + timedelta(minutes=minute), task_name=TASK)
        )
    for minute in range(5, 9):  # a daily interval at each of 01:05-01:08
        services.job_create(
            tenant,
            services.JobSpec(
                name=f"daily-{minute}", every=86400, task_name=TASK, start_at=begin + timedelta(minutes=minute)
            ),
        )

    job = add(tenant, "nightly", "daily 01:00-01:10")

    assert job.cron == "9 1 * * *"  # the one minute nothing else fires in


@pytest.mark.django_db
def test_the_choice_is_stored_and_neither_other_jobs_nor_edits_of_other_fields_move_it():
    tenant = make_tenant()
    job = add(tenant, "nightly")
    chosen, next_run_at = job.cron, job.next_run_at
    other = add(tenant, "other")

    for n in range(30):  # the window fills up, and the other job is edited
        add(tenant, f"more-{n}")
    services.job_update(other, {"flex_window": "daily 01:00-01:30"})
    services.job_update(job, {"description": "renamed soon", "name": "nightly-report", "queue": "reports"})

    job.refresh_from_db()
    assert (job.cron, job.next_run_at) == (chosen, next_run_at)  # a restart reads the same row
    assert services.flexible.place(
        tenant,
        window=schedules.parse_window("daily 01:00-03:00"),
        zone_name="UTC",
        scope="tenant",
        queue="",
        name="x",
        now=NOW,
    ) == services.flexible.place(
        tenant,
        window=schedules.parse_window("daily 01:00-03:00"),
        zone_name="UTC",
        scope="tenant",
        queue="",
        name="x",
        now=NOW,
    )


@pytest.mark.django_db
def test_editing_the_window_places_the_job_again_and_a_cron_replaces_the_window():
    tenant = make_tenant()
    job = add(tenant, "nightly")

    job = services.job_update(job, {"flex_window": "daily 04:00-04:10"})
    assert job.flex_window == "daily 04:00-04:10" and 240 <= minute_of_day(job) < 250
    assert job.next_run_at.strftime("%H") == "04"

    job = services.job_update(job, {"cron": "15 6 * * *"})
    assert (job.cron, job.flex_window, job.flex_scope, job.flex_note) == ("15 6 * * *", "", "", "")


@pytest.mark.django_db
def test_hourly_any_minute_is_placed_as_an_hourly_expression():
    tenant = make_tenant()
    for n in range(3):
        services.job_create(tenant, services.JobSpec(name=f"fixed-{n}", cron="0 * * * *", task_name=TASK))

    jobs = [add(tenant, f"h{n}", "hourly") for n in range(60)]

    minutes = Counter(int(job.cron.split()[0]) for job in jobs)
    assert all(job.cron.endswith(" * * * *") for job in jobs)
    assert minutes[0] == 0 and len(minutes) == 59  # :00 is taken three times an hour already


@pytest.mark.django_db
def test_the_queue_scope_avoids_other_tenants_jobs_on_the_queue_and_the_tenant_scope_does_not(settings):
    settings.CRONFLEET_QUEUES = ["reports"]  # a queue the tenants share (else it is one tenant's own)
    first, second = make_tenant(), make_tenant()
    for n in range(4):
        services.job_create(
            first, services.JobSpec(name=f"fixed-{n}", cron="0 1 * * *", task_name=TASK, queue="reports")
        )

    by_queue = [add(second, f"q{n}", "daily 01:00-01:02", queue="reports", flex_scope="queue") for n in range(3)]
    by_tenant = [add(second, f"t{n}", "daily 01:00-01:02", queue="reports") for n in range(2)]

    assert [job.cron for job in by_queue] == ["1 1 * * *"] * 3
    assert "queue 'reports'" in by_queue[0].flex_note
    # The tenant's own three at 01:01 count; the other tenant's four at 01:00 do not.
    assert [job.cron for job in by_tenant] == ["0 1 * * *"] * 2


@pytest.mark.django_db
def test_a_chosen_time_in_a_spring_forward_gap_fires_as_a_fixed_time_cron_job_does():
    tenant = make_tenant(timezone="Europe/Berlin")
    job = add(tenant, "gap", "daily 02:30-02:31")  # 02:30 does not exist in Berlin on 2027-03-28
    plain = schedules.Schedule(cron="30 2 * * *", timezone="Europe/Berlin")
    eve = datetime(2027, 3, 27, 12, tzinfo=UTC)

    fire = schedules.next_fire_after(job.schedule, eve)

    assert job.cron == "30 2 * * *" and job.timezone == "Europe/Berlin"
    assert fire == schedules.next_fire_after(plain, eve) == datetime(2027, 3, 28, 1, 0, tzinfo=UTC)  # 03:00 CEST
    assert schedules.fire_anomaly(job.schedule, fire).startswith("dst_gap")
    # 02:30 happens twice on 2027-10-31: a fixed-time job fires in the first pass only (CEST).
    autumn = schedules.preview(job.schedule, datetime(2027, 10, 30, 12, tzinfo=UTC), 2)
    assert autumn == schedules.preview(plain, datetime(2027, 10, 30, 12, tzinfo=UTC), 2)
    assert autumn == [datetime(2027, 10, 31, 0, 30, tzinfo=UTC), datetime(2027, 11, 1, 1, 30, tzinfo=UTC)]


RACES = 8  # rounds, each in a window of its own: 01:00-01:05, 02:00-02:05...


def race_in_windows(tenants, add_one) -> list[Counter]:
    """Round by round, fill four minutes of the hour's five-minute window with fixed-time jobs
    (so a placement read before any other is saved sees one free minute), then release one
    `add_one(tenant, name, window)` per tenant in `tenants` at the same instant (a barrier), each
    on a connection of its own. The jobs per minute of each round's window, fixed ones included."""
    barrier = threading.Barrier(len(tenants), timeout=30)
    errors: list[BaseException] = []

    def race(index: int, window: str, name: str) -> None:
        try:
            barrier.wait()
            add_one(tenants[index], f"{name}-{index}", window)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)
            barrier.abort()
        finally:
            connections.close_all()

    loads = []
    for hour in range(1, RACES + 1):
        for minute in range(4):
            add_one(tenants[0], f"fixed-{hour}-{minute}", None, cron=f"{minute} {hour} * * *")
        threads = [
            threading.Thread(target=race, args=(index, f"daily {hour:02}:00-{hour:02}:05", f"flex-{hour}"))
            for index in range(len(tenants))
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert not errors, errors
        assert not any(thread.is_alive() for thread in threads)
        hours = [job.cron.split()[:2] for job in Job.objects.filter(tenant__in=tenants)]
        loads.append(Counter({minute: 0 for minute in "01234"}) + Counter(m for m, h in hours if h == str(hour)))
    return loads


def flat(load: Counter) -> bool:
    """Placed one after the other, each job takes a least loaded minute: no minute holds two
    more than another."""
    counts = [load[minute] for minute in "01234"]
    return max(counts) - min(counts) <= 1


@pytest.mark.django_db(transaction=True)  # each racer's own connection sees the others' commits
def test_jobs_of_a_tenant_added_at_the_same_instant_are_placed_as_if_one_after_the_other():
    tenant = make_tenant()

    def add_one(tenant, name, window, **fields):
        if window is None:
            return services.job_create(tenant, services.JobSpec(name=name, task_name=TASK, **fields))
        return add(tenant, name, window)

    loads = race_in_windows([tenant] * 4, add_one)

    assert all(flat(load) for load in loads), loads  # else two racers took the one free minute
    assert connection.vendor == "postgresql"


@pytest.mark.django_db(transaction=True)
def test_queue_scope_jobs_of_tenants_added_at_the_same_instant_are_placed_one_after_the_other(settings):
    settings.CRONFLEET_QUEUES = ["nightly"]  # a queue the tenants share (else it is one tenant's own)
    tenants = [make_tenant() for _ in range(4)]

    def add_one(tenant, name, window, **fields):
        if window is None:
            return services.job_create(tenant, services.JobSpec(name=name, task_name=TASK, queue="nightly", **fields))
        return add(tenant, name, window, queue="nightly", flex_scope="queue")

    loads = race_in_windows(tenants, add_one)

    assert all(flat(load) for load in loads), loads


@pytest.mark.django_db
def test_rebalance_moves_jobs_off_a_minute_that_filled_up_and_a_dry_run_saves_nothing():
    tenant = make_tenant()
    placed = [add(tenant, f"nightly-{n}", "daily 01:00-01:10") for n in range(30)]
    crowded = [job for job in placed if job.cron == "3 1 * * *"]
    assert len(crowded) == 3
    for n in range(50):
        services.job_create(tenant, services.JobSpec(name=f"fixed-{n}", cron="3 1 * * *", task_name=TASK))

    dry = services.jobs_rebalance(tenant=tenant, dry_run=True)
    assert {move.job.id for move in dry if move.moved} >= {job.id for job in crowded}
    assert Job.objects.filter(tenant=tenant, flex_window__gt="", cron="3 1 * * *").count() == 3

    moves = services.jobs_rebalance(tenant=tenant, actor="cli")

    after = Counter(Job.objects.filter(tenant=tenant).exclude(flex_window="").values_list("cron", flat=True))
    assert after["3 1 * * *"] == 0 and max(after.values()) <= math.ceil(30 / 9)
    moved = [move for move in moves if move.moved]
    job = Job.objects.get(id=moved[0].job.id)
    assert job.version == moved[0].job.version + 1 and job.next_run_at.minute == int(job.cron.split()[0])
    assert AuditEvent.objects.filter(action="job.rebalanced").count() == len(moved)
    assert not any(move.moved for move in services.jobs_rebalance(tenant=tenant, dry_run=True))  # stable


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"cron": "0 1 * * *"}, "flex_window", "give a window or a schedule (cron), not both"),
        ({"every": 600}, "flex_window", "not both"),
        ({"flex_window": "daily 25:00-03:00"}, "flex_window", "'25:00' is not a time of day"),
        ({"flex_window": "daily 02:00-02:00"}, "flex_window", "is empty"),
        ({"jitter_seconds": 60}, "jitter_seconds", "must be 0 with a flex_window"),
        ({"flex_scope": "planet"}, "flex_scope", "must be one of tenant, queue"),
        ({"timezone": "Mars/Olympus"}, "timezone", "unknown time zone 'Mars/Olympus'"),
        ({"flex_window": "", "cron": "0 1 * * *", "flex_scope": "queue"}, "flex_scope", "applies to a job with a"),
    ],
)
def test_bad_flexible_input_is_refused_naming_the_field(fields, field, message):
    tenant = make_tenant()
    fields.setdefault("flex_window", "daily 01:00-03:00")

    with pytest.raises(services.InvalidInput, match=re.escape(message)) as caught:
        services.job_create(tenant, services.JobSpec(name="bad", task_name=TASK, **fields))

    assert caught.value.field == field
    assert not Job.objects.filter(tenant=tenant).exists()


# --- the API ------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_api_creates_a_flexible_job_shows_the_chosen_time_and_why_and_keeps_it_on_edits():
    tenant = make_tenant(timezone="Europe/Berlin")
    api = client_for(tenant)
    body = {"name": "nightly", "schedule": {"window": "daily 01:00-03:00"}, "target": {"kind": "task", "task": TASK}}

    created = api.post("/api/v1/jobs/", body, format="json")

    assert created.status_code == 201, created.json()
    schedule = created.json()["schedule"]
    assert schedule["window"] == "daily 01:00-03:00" and schedule["scope"] == "tenant"
    assert schedule["timezone"] == "Europe/Berlin" and re.fullmatch(r"\d+ [12] \* \* \*", schedule["chosen"])
    assert schedule["why"].startswith(f"{int(schedule['chosen'].split()[1]):02d}:") and "fewest" in schedule["why"]
    job_id = created.json()["id"]
    preview = api.get(f"/api/v1/jobs/{job_id}/preview/?count=2").json()
    assert preview["placement"] == schedule["why"]
    assert preview["fires"][0]["local"][11:16] == schedule["why"][:5]

    patched = api.patch(f"/api/v1/jobs/{job_id}/", {"description": "x"}, format="json").json()
    assert patched["schedule"]["chosen"] == schedule["chosen"]
    replaced = api.patch(f"/api/v1/jobs/{job_id}/", {"schedule": {"cron": "0 5 * * *"}}, format="json").json()
    assert replaced["schedule"] == {"cron": "0 5 * * *", "timezone": "Europe/Berlin"}


@pytest.mark.django_db
def test_the_api_names_the_window_field_in_its_errors_and_previews_an_unsaved_window():
    tenant = make_tenant()
    api = client_for(tenant)
    target = {"kind": "task", "task": TASK}

    bad = api.post(
        "/api/v1/jobs/", {"name": "j", "schedule": {"window": "daily 25:00-03:00"}, "target": target}, format="json"
    )
    both = api.post(
        "/api/v1/jobs/",
        {"name": "j", "schedule": {"window": "hourly", "cron": "0 1 * * *"}, "target": target},
        format="json",
    )
    preview = api.post("/api/v1/preview/", {"schedule": {"window": "hourly"}, "count": 2}, format="json")

    assert bad.status_code == 400 and "'25:00' is not a time of day" in errors_of(bad)["schedule.window"]
    assert both.status_code == 400 and "exactly one of cron, every, at or window" in errors_of(both)["schedule"]
    assert preview.status_code == 200, preview.json()
    assert "chosen in hourly" in preview.json()["placement"]
    assert not Job.objects.filter(tenant=tenant).exists()


# --- the command line ---------------------------------------------------------------------


def run(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


@pytest.mark.django_db
def test_jobs_add_with_a_window_prints_the_placement_and_rebalance_prints_old_and_new_times():
    tenant = make_tenant()

    out = run(
        "jobs", "add", "--tenant", tenant.slug, "--name", "nightly", "--window", "daily 01:00-01:02", "--task", TASK
    )
    job = Job.objects.get(tenant=tenant)
    assert f"schedule: window daily 01:00-01:02 (UTC), placed at cron {job.cron}" in out
    assert f"placement: {job.flex_note}" in out
    assert re.search(rf"\nplacement +{re.escape(job.flex_note)}\n", run("jobs", "show", str(job.id)))
    for n in range(3):
        services.job_create(tenant, services.JobSpec(name=f"fixed-{n}", cron=job.cron, task_name=TASK))

    dry = run("jobs", "rebalance", "--tenant", tenant.slug, "--dry-run")

    old = f"01:0{job.cron.split()[0]}"
    new = "01:01" if old == "01:00" else "01:00"
    assert re.search(rf"{job.id} .* daily 01:00-01:02 \(UTC\) +{old} +-> +{new} +moved", dry), dry
    assert "1 flexible job: 1 would move (dry run: nothing saved)" in dry
    assert Job.objects.get(id=job.id).cron == job.cron


@pytest.mark.django_db
def test_jobs_add_refuses_a_window_beside_a_cron_and_a_bad_window_naming_the_field():
    tenant = make_tenant()

    with pytest.raises(
        CommandError, match=re.escape("jobs add: give --window or one of --cron, --every, --at, not both (--cron)")
    ):
        run(
            "jobs",
            "add",
            "--tenant",
            tenant.slug,
            "--name",
            "j",
            "--window",
            "hourly",
            "--cron",
            "0 1 * * *",
            "--task",
            TASK,
        )
    with pytest.raises(CommandError, match=re.escape("jobs add: flex_window: '25:00' is not a time of day")):
        run("jobs", "add", "--tenant", tenant.slug, "--name", "j", "--window", "daily 25:00-03:00", "--task", TASK)
    assert not Job.objects.filter(tenant=tenant).exists()


def test_db_now_is_what_placement_reads(db):
    assert abs(db_now() - datetime.now(UTC)) < timedelta(minutes=5)


# --- the bench ----------------------------------------------------------------------------


class BenchCommand:
    """What bench/flexible.py needs of the bench command: its stdout and its notes."""

    def __init__(self) -> None:
        self.out = io.StringIO()
        self.stdout = OutputWrapper(self.out)  # as a command's: each write a line
        self.notes: list[str] = []

    def note(self, message: str) -> None:
        self.notes.append(message)


@pytest.mark.django_db
def test_bench_flexible_prints_its_table_and_the_flexible_peak_is_no_higher_than_the_jitter_peak():
    command = BenchCommand()

    ok = flexible.run(command, flexible.Options(jobs=60, window="daily 01:00-01:30"))

    out = command.out.getvalue()
    rows = {line.split()[0]: line.split() for line in out.splitlines() if re.match(r"  (flexible|jitter|fixed) ", line)}
    assert ok, out
    assert "peak/min" in out and "ms/add" in out
    assert int(rows["flexible"][2]) == 2 <= int(rows["jitter"][2])  # 60 jobs over 30 minutes
    assert int(rows["fixed"][2]) == 60
