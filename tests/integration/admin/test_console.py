"""The operator's console (issue 13): what a person reads in the admin, without a browser.

tests/system/admin/test_console_browser.py looks at the same pages through headless Chromium.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse

from scheduler_app import services
from scheduler_app.models import AuditEvent, Job, JobRun, NodeKind, RunState, Tenant
from tests.support.admin import url

TASK = "scheduler_app.echo"
BASE = datetime(2024, 1, 1, 18, 33, 5, tzinfo=UTC)


@pytest.fixture
def tenant(db) -> Tenant:
    return services.tenant_create(slug="demo", name="Demo", timezone="Europe/Berlin")


@pytest.fixture
def job(tenant) -> Job:
    return services.job_create(tenant, services.JobSpec(name="flaky", task_name=TASK, cron="*/5 * * * *"))


def make_run(job: Job, at: datetime, state: str = RunState.SUCCEEDED, **fields) -> JobRun:
    fields.setdefault("started_at", at + timedelta(seconds=1))
    fields.setdefault("finished_at", at + timedelta(seconds=6))
    return JobRun.objects.create(job=job, tenant=job.tenant, scheduled_at=at, state=state, created_at=at, **fields)


# --- 1. names, times, the audit trail, the index ------------------------------------------


def test_a_job_is_titled_and_listed_as_tenant_slash_name(admin_client, job):
    assert str(job) == "demo/flaky"

    change = admin_client.get(url("job", "change", job.pk)).content.decode()
    listing = admin_client.get(url("job", "changelist")).content.decode()

    assert "<h2>demo/flaky</h2>" in change
    assert ">demo/flaky<" in listing


def test_times_show_seconds_and_the_zone(admin_client, job):
    run = make_run(job, BASE)

    listing = admin_client.get(url("jobrun", "changelist")).content.decode()
    page = admin_client.get(url("jobrun", "change", run.pk)).content.decode()

    for html in (listing, page):
        assert "2024-01-01 18:33:05 UTC" in html
        assert "2024-01-01 18:33:06 UTC" in html  # started a second later: told apart
        assert "p.m." not in html


def test_the_audit_trail_names_the_job_of_run_events(admin_client, job):
    run = make_run(job, BASE, state=RunState.DEAD)
    # As dispatch.recovery.mark_lost_runs and the worker write them: the job's id, no name.
    AuditEvent.objects.create(tenant=job.tenant, job_id=job.pk, run_id=run.pk, action="run.lost", actor="beat")

    html = admin_client.get(url("auditevent", "changelist")).content.decode()

    assert f'<a href="{url("job", "change", job.pk)}">demo/flaky</a>' in html


def test_the_index_has_no_empty_celery_results_section(admin_client, db):
    html = admin_client.get("/admin/").content.decode()

    assert "Celery Results" not in html
    assert "Periodic Tasks" not in html
    assert "Cronfleet scheduler" in html


# --- 2. the run page and the ledger ------------------------------------------------------------


def test_the_run_page_shows_every_attempt_the_whole_error_and_replays(admin_client, job):
    long_error = "Traceback (most recent call last):\n" + "  frame\n" * 40 + "RuntimeError: the end"
    run = make_run(
        job,
        BASE,
        state=RunState.DEAD,
        attempt=2,
        worker="celery@w2",
        error=long_error,
        attempts=[
            {
                "attempt": 1,
                "worker": "celery@w1",
                "started_at": "2024-01-01T18:33:06.100000+00:00",
                "finished_at": "2024-01-01T18:33:08.350000+00:00",
                "outcome": "retrying",
                "error": "ConnectionError: reset",
            },
            {
                "attempt": 2,
                "worker": "celery@w2",
                "started_at": "2024-01-01T18:33:20+00:00",
                "finished_at": "2024-01-01T18:33:25+00:00",
                "outcome": "dead",
                "error": "RuntimeError: the end",
            },
        ],
    )

    html = admin_client.get(url("jobrun", "change", run.pk)).content.decode()

    assert f"Run {run.pk} of demo/flaky at 2024-01-01 18:33:05 UTC" in html
    assert "celery@w1" in html and "ConnectionError: reset" in html and "2024-01-01 18:33:08 UTC" in html
    assert "2.25 s" in html  # attempt 1 took 2.25 s
    assert "RuntimeError: the end" in html and long_error.count("frame") == html.count("  frame")
    assert "Replay as attempt 3" in html

    response = admin_client.post(reverse("admin:scheduler_app_jobrun_replay", args=[run.pk]), follow=True)

    run.refresh_from_db()
    assert (run.state, run.attempt, run.error) == (RunState.QUEUED, 3, "")
    assert "queued again as attempt 3" in response.content.decode()
    assert AuditEvent.objects.filter(run_id=run.pk, action="run.replayed", actor="admin:admin").exists()


def test_the_run_page_shows_the_attempt_in_progress_and_no_replay(admin_client, job):
    run = make_run(
        job,
        BASE,
        state=RunState.RUNNING,
        attempt=2,
        worker="celery@w9",
        finished_at=None,
        attempts=[
            {
                "attempt": 1,
                "worker": "celery@w1",
                "started_at": "2024-01-01T18:33:06+00:00",
                "finished_at": "2024-01-01T18:33:07+00:00",
                "outcome": "retrying",
                "error": "boom",
            }
        ],
    )

    html = admin_client.get(url("jobrun", "change", run.pk)).content.decode()

    assert "celery@w1" in html and "celery@w9" in html and "cf-current" in html
    assert "Replay as attempt" not in html
    assert admin_client.post(reverse("admin:scheduler_app_jobrun_replay", args=[run.pk]), follow=True)
    run.refresh_from_db()
    assert run.state == RunState.RUNNING


def test_replay_needs_the_change_job_permission(client, django_user_model, job):
    run = make_run(job, BASE, state=RunState.FAILED)
    viewer = django_user_model.objects.create_user("viewer", password="pw", is_staff=True)
    from django.contrib.auth.models import Permission

    viewer.user_permissions.add(Permission.objects.get(codename="view_jobrun"))
    client.force_login(viewer)

    assert "Replay as attempt" not in client.get(url("jobrun", "change", run.pk)).content.decode()
    assert client.post(reverse("admin:scheduler_app_jobrun_replay", args=[run.pk])).status_code == 403


def test_the_ledger_cuts_long_errors_and_keeps_the_whole_text_on_hover(admin_client, job):
    make_run(job, BASE, state=RunState.FAILED, error="E" * 300)

    html = admin_client.get(url("jobrun", "changelist")).content.decode()

    assert "E" * 89 + "…" in html and "E" * 300 in html  # shown cut, title whole
    assert "18:33:06 UTC" in html and "5.00 s" in html  # started, took


@pytest.mark.parametrize("term", ["demo/flaky", "flak", "FIRE_KEY", "RUN_ID"])
def test_the_ledger_searches_by_job_fire_key_and_run_id(admin_client, job, tenant, term):
    other = services.job_create(tenant, services.JobSpec(name="steady", task_name=TASK, cron="0 * * * *"))
    run = make_run(job, BASE)
    make_run(other, BASE)
    term = term.replace("FIRE_KEY", run.fire_key).replace("RUN_ID", str(run.pk))

    response = admin_client.get(url("jobrun", "changelist"), {"q": term})

    assert [found.pk for found in response.context["cl"].result_list] == [run.pk]


def test_the_ledger_counts_at_most_the_cap(admin_client, job, monkeypatch):
    from scheduler_app.admin import runs as runs_admin

    monkeypatch.setattr(runs_admin, "LEDGER_COUNT_CAP", 3)
    for minute in range(5):
        make_run(job, BASE + timedelta(minutes=minute))

    html = admin_client.get(url("jobrun", "changelist")).content.decode()
    filtered = admin_client.get(url("jobrun", "changelist"), {"state__exact": "succeeded"}).content.decode()

    assert "more than 3 job runs" in html
    assert "more than 3 results" in filtered and "4 results" not in filtered  # beside the search box


def test_a_filtered_ledger_is_newest_fire_first(admin_client, job):
    late = make_run(job, BASE + timedelta(hours=1))
    early = make_run(job, BASE)  # recorded later (a backfill), fired earlier

    unfiltered = admin_client.get(url("jobrun", "changelist")).context["cl"].result_list
    by_job = admin_client.get(url("jobrun", "changelist"), {"job__id__exact": job.pk}).context["cl"].result_list

    assert [run.pk for run in unfiltered] == [early.pk, late.pk]  # by id: the primary key's order
    assert [run.pk for run in by_job] == [late.pk, early.pk]  # by fire time: the (job, scheduled_at) index


def test_a_deep_ledger_page_shows_its_rows_newest_first(admin_client, job, monkeypatch):
    """Pages are read as ids first, then the rows: the same rows in the same order."""
    from scheduler_app.admin.runs import JobRunAdmin

    monkeypatch.setattr(JobRunAdmin, "list_per_page", 3)
    runs = [make_run(job, BASE + timedelta(minutes=minute), state=RunState.FAILED) for minute in range(8)]

    second = admin_client.get(url("jobrun", "changelist"), {"p": 2}).context["cl"].result_list
    third = admin_client.get(url("jobrun", "changelist"), {"p": 3, "state__exact": "failed"}).context["cl"].result_list

    assert [run.pk for run in second] == [run.pk for run in runs[4:1:-1]]
    assert [run.pk for run in third] == [run.pk for run in runs[1::-1]]
    assert [run.job.tenant.slug for run in second] == ["demo"] * 3  # the job and tenant came with them


def test_the_ledger_filters_by_fire_date_and_sorts_by_id_only(admin_client, job):
    from scheduler_app.models import db_now

    now = db_now()
    recent = make_run(job, now - timedelta(hours=1))
    make_run(job, now - timedelta(days=40))

    response = admin_client.get(url("jobrun", "changelist"))
    html = response.content.decode()
    week = next(
        choice["query_string"]
        for spec in response.context["cl"].filter_specs
        if spec.title == "fire time"
        for choice in spec.choices(response.context["cl"])
        if choice["display"] == "Past 7 days"
    )
    filtered = admin_client.get(url("jobrun", "changelist") + week).context["cl"].result_list
    by_fire_time = admin_client.get(url("jobrun", "changelist"), {"o": "-2"}).context["cl"].result_list

    assert [run.pk for run in filtered] == [recent.pk]
    # Only the id's header sorts: the others would sort the whole ledger.
    assert html.count('class="sortable') == 1 and 'class="sortable column-id' in html
    assert [run.pk for run in by_fire_time] == sorted((run.pk for run in by_fire_time), reverse=True)


def test_a_tenant_s_runs_in_one_state_are_counted_from_an_index_alone(job):
    from django.db import connection, transaction

    make_run(job, BASE, state=RunState.FAILED)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute(
            "EXPLAIN SELECT count(*) FROM (SELECT 1 FROM scheduler_app_jobrun "
            "WHERE tenant_id = %s AND state = 'failed' LIMIT 10001) AS capped",
            [job.tenant_id],
        )
        plan = "\n".join(row[0] for row in cursor.fetchall())

    assert "Index Only Scan using jobrun_tenant_state_idx" in plan, plan


# --- 3. the job page ------------------------------------------------------------------------


def console(admin_client, job, action: str, **data):
    return admin_client.post(reverse("admin:scheduler_app_job_console", args=[job.pk, action]), data, follow=True)


def test_the_job_page_shows_recent_runs_a_timeline_and_the_next_fires_in_the_job_s_zone(admin_client, job):
    from scheduler_app.models import db_now

    now = db_now()
    make_run(job, now - timedelta(hours=2), state=RunState.SUCCEEDED)
    make_run(job, now - timedelta(hours=1), state=RunState.DEAD, error="RuntimeError: nope")

    html = admin_client.get(url("job", "change", job.pk)).content.decode()

    assert html.count('class="cf-point cf-state-fill') == 2  # the timeline's two fires
    assert "cf-state-fill cf-dead" in html
    recent = html.split('id="cf-recent-runs"')[1].split("</table>")[0]
    assert recent.count("<tr>") == 3 and "1.00 s" in recent and "5.00 s" in recent  # start lag, took
    assert "RuntimeError: nope" in recent
    assert len(re.findall(r"\d\d:\d\d:\d\d CET \(", html)) == 5  # the next 5 fires, local and UTC


def test_the_next_fires_flag_dst(admin_client, tenant):
    job = services.job_create(tenant, services.JobSpec(name="night", task_name=TASK, cron="30 2 * * *"))
    from scheduler_app.models import Job as JobModel

    JobModel.objects.filter(pk=job.pk).update(next_run_at=datetime(2026, 3, 28, 1, 30, tzinfo=UTC))

    html = admin_client.get(url("job", "change", job.pk)).content.decode()

    assert "dst_gap" in html  # 02:30 does not exist in Berlin on 2026-03-29


def test_the_job_page_pauses_resumes_and_triggers(admin_client, job):
    assert "Paused demo/flaky" in console(admin_client, job, "pause").content.decode()
    job.refresh_from_db()
    assert not job.enabled

    assert "Resumed demo/flaky" in console(admin_client, job, "resume").content.decode()
    html = console(admin_client, job, "trigger").content.decode()

    job.refresh_from_db()
    assert job.enabled
    run = JobRun.objects.get(job=job, trigger="manual")
    assert f"Triggered demo/flaky: run {run.pk}" in html


def test_the_job_page_backfills_after_a_dry_run(admin_client, tenant):
    job = services.job_create(tenant, services.JobSpec(name="hourly", task_name=TASK, cron="0 * * * *"))
    bounds = {"start": "2024-01-01 00:30:00", "end": "2024-01-01 03:30:00"}  # the site's zone (UTC)

    dry = console(admin_client, job, "backfill", dry_run="1", **bounds).content.decode()

    assert "Dry run: 3 fire(s) in the range, 0 already recorded, 3 would be backfilled" in dry
    assert not JobRun.objects.filter(job=job).exists()

    done = console(admin_client, job, "backfill", dry_run="0", **bounds).content.decode()

    assert "Backfilled 3 run(s)" in done
    assert JobRun.objects.filter(job=job, trigger="backfill").count() == 3


def test_the_job_page_refuses_a_bad_backfill_naming_the_field(admin_client, job):
    html = console(admin_client, job, "backfill", dry_run="1", start="yesterday", end="2024-01-01 03:00:00")

    assert "Backfill: start: give a date and time" in html.content.decode()  # capitalised by the admin


def test_the_job_page_replays_the_last_failed_run(admin_client, job):
    make_run(job, BASE, state=RunState.FAILED)
    failed = make_run(job, BASE + timedelta(minutes=5), state=RunState.DEAD)
    make_run(job, BASE + timedelta(minutes=10), state=RunState.SUCCEEDED)
    assert (
        f"Replay last failed run ({failed.pk}, dead)" in admin_client.get(url("job", "change", job.pk)).content.decode()
    )

    html = console(admin_client, job, "replay").content.decode()

    failed.refresh_from_db()
    assert (failed.state, failed.attempt) == (RunState.QUEUED, 2)
    assert f"Run {failed.pk} (2024-01-01 18:38:05 UTC) is queued again as attempt 2" in html


def test_the_job_page_s_actions_need_the_change_job_permission(client, django_user_model, job):
    from django.contrib.auth.models import Permission

    viewer = django_user_model.objects.create_user("viewer", password="pw", is_staff=True)
    viewer.user_permissions.add(
        *Permission.objects.filter(codename__in=["view_job", "view_jobrun", "view_alertrule", "view_alert"])
    )  # the console's panels
    client.force_login(viewer)

    assert "You may look, not operate" in client.get(url("job", "change", job.pk)).content.decode()
    assert client.post(reverse("admin:scheduler_app_job_console", args=[job.pk, "pause"])).status_code == 403


# --- 5. the dashboard ------------------------------------------------------------------------------


def test_the_dashboard_charts_the_last_hour_and_day_and_the_next_hour(admin_client, job):
    from scheduler_app.models import db_now
    from scheduler_app.observability import dashboard

    now = db_now()
    for minutes in (50, 40, 30, 20, 3):
        at = now - timedelta(minutes=minutes, seconds=6)
        make_run(job, at, state=RunState.SUCCEEDED, dispatched_at=at + timedelta(seconds=0.25))
    at = now - timedelta(minutes=10, seconds=6)
    make_run(job, at, state=RunState.DEAD, error="boom", dispatched_at=at + timedelta(seconds=0.25))
    assert dashboard.roll_up(now, max_minutes=1440) > 0

    index = admin_client.get("/admin/").content.decode()
    html = admin_client.get(reverse("cronfleet:dashboard")).content.decode()

    assert 'href="/admin/dashboard/"' in index
    runs_hour = html.split('id="cf-runs-hour"')[1].split("</section>")[0]
    assert runs_hour.count('class="cf-point') == 6
    assert html.split('id="cf-lag-hour"')[1].split("</section>")[0].count('data-series="p99"') == 6
    assert html.split('id="cf-dispatch-hour"')[1].split("</section>")[0].count('data-series="p99"') == 6
    assert html.split('id="cf-runs-day"')[1].split("</section>")[0].count('class="cf-point') >= 5
    job.refresh_from_db()
    window_end = now.replace(second=0, microsecond=0) + timedelta(hours=1)
    fires = len(range(0, int((window_end - job.next_run_at).total_seconds()) - 1, 300))  # */5 from next_run_at
    assert html.split('id="cf-forecast"')[1].split("</section>")[0].count('data-series="fires"') == fires  # 11 or 12
    assert ">demo/flaky</a></td><td>1</td>" in html  # top failing jobs
    assert '<td><a href="?tenant=demo">demo</a></td><td>6</td><td>1</td>' in html  # noisiest tenants
    assert 'id="cf-nodes"' in html and 'id="cf-queues"' in html


def test_a_tenant_s_dashboard_counts_that_tenant_only(admin_client, job):
    from scheduler_app.models import db_now
    from scheduler_app.observability import dashboard

    other = services.tenant_create(slug="other", name="Other", timezone="UTC")
    noisy = services.job_create(other, services.JobSpec(name="noisy", task_name=TASK, cron="* * * * *"))
    now = db_now()
    for minutes in (50, 30, 3):
        make_run(job, now - timedelta(minutes=minutes, seconds=6), state=RunState.DEAD, error="boom")
    for minutes in range(2, 12):
        make_run(noisy, now - timedelta(minutes=minutes, seconds=6))
    dashboard.roll_up(now, max_minutes=1440)

    html = admin_client.get(reverse("cronfleet:dashboard"), {"tenant": "demo"}).content.decode()
    missing = admin_client.get(reverse("cronfleet:dashboard"), {"tenant": "nobody"})

    assert 'id="cf-tenant"' in html and "Dashboard of tenant demo" in html
    assert html.split('id="cf-runs-hour"')[1].split("</section>")[0].count('data-series="dead"') == 3
    assert 'data-series="succeeded"' not in html.split('id="cf-runs-hour"')[1].split("</section>")[0]
    assert ">demo/flaky</a></td><td>3</td>" in html and "other/noisy" not in html
    forecast = html.split('id="cf-forecast"')[1].split("</section>")[0]
    assert 0 < forecast.count('data-series="fires"') <= 12  # demo's */5 job alone, not other's every minute
    assert missing.status_code == 404 and "tenant: there is no tenant &#x27;nobody&#x27;" in missing.content.decode()


@pytest.mark.django_db(transaction=True)
def test_the_dashboard_shows_each_queue_s_depth_and_the_beats_and_workers(admin_client, tenant, queue_name):
    """Runs triggered with no worker wait in their broker queue: the dashboard reads the depth
    from the broker and says no live worker consumes that queue; a beat's heartbeat is listed."""
    from scheduler_app.observability import nodes

    job = services.job_create(
        tenant, services.JobSpec(name="queued", task_name=TASK, cron="0 0 1 1 *", queue=queue_name)
    )
    for _ in range(3):
        services.job_trigger(job)
    nodes.Registration(NodeKind.BEAT, "beat-under-test", stale_after=60, queues=[queue_name]).register("dispatching")

    html = admin_client.get(reverse("cronfleet:dashboard")).content.decode()

    queues = html.split('id="cf-queues"')[1].split("</section>")[0]
    assert f"<tr><td>{queue_name}</td><td>3</td>" in queues
    assert 'cf-state cf-failed">none</span>' in queues.split(queue_name)[1].split("</tr>")[0]
    fleet = html.split('id="cf-nodes"')[1].split("</section>")[0]
    assert "<td>beat-under-test</td>" in fleet and ">live</span>" in fleet
    assert "queued 3" in fleet


def test_the_dashboard_lists_the_latest_alerts_of_the_day(admin_client, job):
    from scheduler_app.models import Alert, db_now

    other = services.job_create(
        services.tenant_create(slug="other", name="Other"),
        services.JobSpec(name="quiet", task_name=TASK, cron="0 9 * * *"),
    )
    now = db_now()
    for kind, alerted, hours in (("dead", job, 1), ("no_success", other, 2), ("failed", job, 30)):
        Alert.objects.create(
            job=alerted,
            tenant=alerted.tenant,
            kind=kind,
            dedup_key=f"{kind}-{alerted.pk}",
            message=f"{alerted.name} went {kind}",
            raised_at=now - timedelta(hours=hours),
            delivered_at=now if kind == "dead" else None,
        )

    html = admin_client.get(reverse("cronfleet:dashboard")).content.decode()
    mine = admin_client.get(reverse("cronfleet:dashboard"), {"tenant": "demo"}).content.decode()

    panel = html.split('id="cf-alerts"')[1].split("</section>")[0]
    assert ">demo/flaky</a>" in panel and ">other/quiet</a>" in panel
    assert "flaky went dead" in panel and "quiet went no_success" in panel
    assert "flaky went failed" not in panel  # raised 30 h ago
    assert panel.index("flaky went dead") < panel.index("quiet went no_success")  # newest first
    assert "other/quiet" not in mine.split('id="cf-alerts"')[1].split("</section>")[0]


def test_the_dashboard_is_for_staff_only(client, job):
    assert client.get(reverse("cronfleet:dashboard")).status_code == 302  # to the login page


def test_empty_charts_say_no_data(admin_client, job):
    """With nothing finished and nothing due, each chart says so instead of empty axes."""
    Job.objects.filter(pk=job.pk).update(enabled=False)

    html = admin_client.get(reverse("cronfleet:dashboard")).content.decode()
    page = admin_client.get(url("job", "change", job.pk)).content.decode()

    for chart in ("cf-runs-hour", "cf-lag-hour", "cf-runs-day", "cf-failure-day", "cf-forecast"):
        section = html.split(f'id="{chart}"')[1].split("</section>")[0]
        assert 'class="cf-point' not in section and ">no data</text>" in section, chart
    assert ">no data</text>" in page.split('class="cf-chart cf-timeline"')[1].split("</figure>")[0]
