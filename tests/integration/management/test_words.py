"""What the commands say of chained jobs, calendar-skipped fires and maintenance windows
(issue 41, "words that mislead"): a chained job by its parent, never "no fire left"; a fire
the job's calendar skips marked where `jobs add` lists fires; a window already over refused
naming `ends_at`, and windows listed as open, closed or upcoming in their zone's words."""

from __future__ import annotations

import logging
import re
from datetime import timedelta
from zoneinfo import ZoneInfo

from scheduler_app.admin.schedulelabel import schedule_label
from scheduler_app.models import Job, MaintenanceWindow, db_now
from scheduler_app.services.windows import window_create
from tests.support.cli import TASK, acme, add_job, fails, run, table_rows  # noqa: F401 (acme is a fixture)


def test_a_chained_job_is_described_by_its_parent_wherever_jobs_are_listed(acme):
    add_job(acme, "extract")

    added = run("jobs", "add", "--tenant", "acme", "--name", "load", "--after-job", "extract", "--task", TASK)
    run("jobs", "add", "--tenant", "acme", "--name", "page", "--after-job", "extract", "--after-states",
        "failed,dead", "--task", TASK)  # fmt: skip

    assert "schedule: after extract succeeds" in added
    assert "next fires: none of its own; it runs after extract succeeds" in added
    assert "no fire left" not in added
    listed = {row[2]: row[3] for row in table_rows(run("jobs", "list", "--tenant", "acme"))}
    assert listed["load"] == "after extract succeeds"
    assert listed["page"] == "after extract fails or dies"
    shown = run("jobs", "show", "acme/load")
    assert "(none of its own: it runs after extract succeeds)" in shown and "no fires left" not in shown
    assert "(none of its own: it runs after extract succeeds)" in run("jobs", "preview", "acme/load")
    # The admin's job list column (scheduler_app/admin/schedulelabel.py).
    assert schedule_label(Job.objects.get(name="load")) == "after extract succeeds"
    assert schedule_label(Job.objects.get(name="extract")) == "cron 0 9 * * * (UTC)"


def test_jobs_add_marks_the_fires_its_calendar_skips(acme):
    run("calendars", "add", "--tenant", "acme", "--name", "weekdays", "--weekdays", "mon-fri")

    out = run("jobs", "add", "--tenant", "acme", "--name", "saturdays", "--cron", "0 9 * * 6", "--task", TASK,
              "--calendar", "weekdays", "--calendar-policy", "skip")  # fmt: skip

    assert out.splitlines()[out.splitlines().index("next fires:") + 1].split() == ["#", "UTC", "note"]
    rows = table_rows(out.split("next fires:")[1])
    assert len(rows) == 5
    assert all(row[2].startswith("calendar: ") and "is not a business day in weekdays" in row[2] for row in rows)


def test_a_window_already_over_is_refused_naming_its_end(acme):
    yesterday = db_now() - timedelta(days=1)

    error = fails("windows", "add", "--tenant", "acme", "--name", "late", "--starts-at",
                  (yesterday - timedelta(hours=1)).isoformat(), "--ends-at", yesterday.isoformat())  # fmt: skip

    assert str(error).startswith("windows add: ends_at: the window is already over (it ended ")
    assert error.returncode == 2
    assert not MaintenanceWindow.objects.exists()


def test_windows_are_listed_open_closed_or_upcoming_in_their_zones_words(acme):
    now = db_now()
    window_create(acme, name="now", starts_at=now - timedelta(hours=1), ends_at=now + timedelta(hours=1),
                  zone="Asia/Tokyo")  # fmt: skip
    window_create(acme, name="later", starts_at=now + timedelta(days=2), ends_at=now + timedelta(days=2, hours=1))
    off = window_create(acme, name="off", cron="0 2 * * 0", duration_minutes=60)
    run("windows", "disable", "acme/off")
    ended = window_create(acme, name="ended", starts_at=now + timedelta(hours=1), ends_at=now + timedelta(hours=2))
    MaintenanceWindow.objects.filter(pk=ended.pk).update(
        starts_at=now - timedelta(days=3), ends_at=now - timedelta(days=2)
    )  # over since: only a window that was upcoming when made can be over

    out = run("windows", "list", "--tenant", "acme")

    assert out.splitlines()[0].split()[:4] == ["tenant", "name", "state", "now"]
    rows = {row[1]: row for row in table_rows(out)}
    end_tokyo = (now + timedelta(hours=1)).astimezone(ZoneInfo("Asia/Tokyo"))
    assert rows["now"][2:4] == ["open", f"until {end_tokyo:%a %Y-%m-%d %H:%M} JST"]
    assert rows["later"][2] == "upcoming" and rows["later"][3].startswith("opens ")
    assert rows["off"][2:4] == ["closed", "disabled"] and off.pk
    assert rows["ended"][2:4] == ["closed", "over: will not open again"]
    assert not re.search(r"\d{4}-\d\d-\d\dT", out) and "UTC" in rows["later"][4]  # no raw ISO 8601


def test_a_deployment_window_is_audited_with_plain_values(db, caplog):
    now = db_now()
    with caplog.at_level(logging.INFO, logger="scheduler_app.audit"):
        window_create(None, name="upgrade", starts_at=now + timedelta(days=1), ends_at=now + timedelta(days=1, hours=1))

    (message,) = [record.getMessage() for record in caplog.records if record.name == "scheduler_app.audit"]
    assert "'action': 'skip'" in message and "'running_policy': 'let_finish'" in message
    assert "WindowAction" not in message and "RunningPolicy" not in message
