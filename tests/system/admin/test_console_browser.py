"""The console as a person sees it: real headless Chromium (Debian's, through chromedriver)
logs into the admin at 1,280 px and opens the dashboard, a job page and a run page.
Screenshots go to var/test-artifacts/console/."""

from __future__ import annotations

from datetime import timedelta

import pytest

from scheduler_app import services
from scheduler_app.models import Alert, AlertKind, JobRun, RunState, db_now
from scheduler_app.observability import dashboard
from tests.conftest import ROOT
from tests.support import browser

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not browser.available(), reason="chromium and chromedriver are not installed"),
]
ARTIFACTS = ROOT / "var" / "test-artifacts" / "console"
WIDTH = 1280


@pytest.fixture
def chromium():
    found = browser.Browser(width=WIDTH, height=1000)
    yield found
    found.close()


@pytest.fixture
def seeded(django_user_model, settings):
    django_user_model.objects.create_superuser("ops", "ops@example.com", "a long passphrase 7")
    tenant = services.tenant_create(slug="demo", name="Demo", timezone="Europe/Berlin")
    job = services.job_create(tenant, services.JobSpec(name="flaky", task_name="scheduler_app.echo", cron="* * * * *"))
    now = db_now()
    runs = []
    for minute in range(1, 90):
        # Ten seconds into each past minute: a run's start, dispatch and finish stay inside its
        # minute whatever the second the test runs at, so the charts have one point a minute.
        at = now.replace(second=10, microsecond=0) - timedelta(minutes=minute)
        state = RunState.DEAD if minute % 7 == 0 else RunState.SUCCEEDED
        runs.append(
            JobRun(
                job=job,
                tenant=tenant,
                scheduled_at=at,
                created_at=at,
                state=state,
                attempt=1,
                dispatched_at=at + timedelta(seconds=0.05 + minute % 4 / 10),
                started_at=at + timedelta(seconds=0.4 + minute % 3),
                worker="celery@worker-1",
                finished_at=at + timedelta(seconds=3 + minute % 5),
                error=(
                    "RuntimeError: upstream answered 503 Service Unavailable; " * 8 if state == RunState.DEAD else ""
                ),
            )
        )
    JobRun.objects.bulk_create(runs)
    dashboard.roll_up(now, max_minutes=1440)
    return job


def login(chromium, live_server) -> None:
    chromium.log_in(
        f"{live_server.url}/admin/login/",
        "ops",
        "a long passphrase 7",
        until="document.body && document.body.innerText.includes('Cronfleet administration')",
    )


def test_a_person_sees_the_dashboard_job_and_run_pages(chromium, live_server, seeded):
    login(chromium, live_server)

    chromium.get(f"{live_server.url}/admin/")
    assert chromium.js("return !!document.querySelector('#cf-dashboard-link')")
    assert not chromium.js("return document.body.innerText.includes('Celery Results')")

    chromium.get(f"{live_server.url}/admin/dashboard/")
    chromium.screenshot(ARTIFACTS / "dashboard.png")
    points = chromium.js("""
        const count = (id) => document.querySelectorAll('#' + id + ' .cf-point').length;
        return {hour: count('cf-runs-hour'), lag: count('cf-lag-hour'), dispatch: count('cf-dispatch-hour'),
                day: count('cf-runs-day'), queues: document.querySelectorAll('#cf-queues tbody tr').length,
                failure: count('cf-failure-day'), forecast: count('cf-forecast'),
                failing: document.querySelectorAll('#cf-failing tbody tr').length,
                visible: document.querySelector('#cf-runs-hour svg').getBoundingClientRect().width};""")
    assert points["hour"] >= 55 and points["lag"] >= 110 and points["day"] >= 6 and points["failure"] >= 6, (
        points,
        chromium.js("return document.querySelector('.cf-summary').innerText"),
    )
    assert points["dispatch"] >= 110 and points["queues"] >= 1  # at least the default queue, read from the broker
    assert points["forecast"] >= 59 and points["failing"] == 1 and points["visible"] > 300

    chromium.get(f"{live_server.url}/admin/scheduler_app/job/{seeded.pk}/change/")
    chromium.screenshot(ARTIFACTS / "job.png")
    job_page = chromium.js("""
        return {title: document.querySelector('#content h2').innerText,
                ticks: document.querySelectorAll('.cf-timeline .cf-point').length,
                recent: document.querySelectorAll('#cf-recent-runs tbody tr').length,
                buttons: [...document.querySelectorAll('.cf-actions button')].map(b => b.innerText)};""")
    assert job_page["title"] == "demo/flaky" and job_page["ticks"] == 89 and job_page["recent"] == 20
    assert {"PAUSE", "TRIGGER NOW", "DRY RUN", "BACKFILL"} <= {b.upper() for b in job_page["buttons"]}

    chromium.get(f"{live_server.url}/admin/scheduler_app/jobrun/")
    chromium.screenshot(ARTIFACTS / "ledger.png")
    ledger = chromium.js("""
        const table = document.querySelector('#result_list');
        const heads = [...table.querySelectorAll('thead th')].map(th => th.innerText.trim().toLowerCase());
        const cells = [...table.querySelectorAll('tbody tr:first-child td, tbody tr:first-child th')];
        return {heads: heads, page: document.documentElement.scrollWidth, view: window.innerWidth,
                right: Math.max(...cells.map(c => c.getBoundingClientRect().right))};""")
    assert {"started", "finished", "took", "reason / error"} <= set(ledger["heads"])
    assert ledger["page"] <= ledger["view"] and ledger["right"] <= WIDTH, ledger  # nothing cut off at 1,280 px

    dead = JobRun.objects.filter(job=seeded, state=RunState.DEAD).order_by("-scheduled_at").first()
    chromium.get(f"{live_server.url}/admin/scheduler_app/jobrun/{dead.pk}/change/")
    chromium.screenshot(ARTIFACTS / "run.png")
    run_page = chromium.js("""
        return {attempts: document.querySelectorAll('.cf-attempts tbody tr').length,
                replay: !!document.querySelector('#cf-replay'),
                error: document.querySelector('.cf-pre').innerText.length};""")
    assert run_page["attempts"] >= 1 and run_page["replay"] and run_page["error"] > 400


def test_the_job_and_run_pages_fit_and_name_the_job(chromium, live_server, seeded):
    """The job page's fire times stay on one line, the 24 h timeline's labels are inside
    the chart, and the run page's breadcrumb names the job as tenant/job."""
    login(chromium, live_server)
    chromium.get(f"{live_server.url}/admin/scheduler_app/job/{seeded.pk}/change/")
    job_page = chromium.js("""
        const column = [...document.querySelectorAll('#cf-recent-runs thead th')]
            .findIndex(th => th.innerText.trim().toLowerCase() === 'fire time');
        const lines = [...document.querySelectorAll('#cf-recent-runs tbody tr')].map(tr => {
            const range = document.createRange();
            range.selectNodeContents(tr.children[column]);
            return new Set([...range.getClientRects()].map(r => Math.round(r.top))).size;
        });
        const svg = document.querySelector('.cf-timeline svg').getBoundingClientRect();
        const labels = [...document.querySelectorAll('.cf-timeline svg text')].map(t => {
            const box = t.getBoundingClientRect();
            return {text: t.textContent, inside: box.left >= svg.left - 0.5 && box.right <= svg.right + 0.5};
        });
        return {column: column, lines: lines, labels: labels};""")
    assert job_page["column"] >= 0 and len(job_page["lines"]) == 20
    assert set(job_page["lines"]) == {1}, job_page["lines"]  # each fire time on one line
    assert len(job_page["labels"]) == 5 and all(label["inside"] for label in job_page["labels"]), job_page["labels"]

    run = JobRun.objects.filter(job=seeded).order_by("-scheduled_at").first()
    chromium.get(f"{live_server.url}/admin/scheduler_app/jobrun/{run.pk}/change/")
    crumbs = chromium.js("return document.querySelector('.breadcrumbs').innerText")
    assert "demo/flaky" in crumbs and "of job " not in crumbs, crumbs
    assert chromium.js(
        "return [...document.querySelectorAll('.breadcrumbs a')].some("
        "a => a.getAttribute('href').endsWith('/job/' + arguments[0] + '/change/'))",
        seeded.pk,
    )


PAGES = {  # screenshot name: path under the admin
    "index": "/admin/",
    "dashboard-fit": "/admin/dashboard/",
    "dashboard-tenant": "/admin/dashboard/?tenant=demo",
    "job-fit": "/admin/scheduler_app/job/{job}/change/",
    "job-list": "/admin/scheduler_app/job/",
    "ledger-failed": "/admin/scheduler_app/jobrun/?state__exact=dead",
    "ledger-long-names": "/admin/scheduler_app/jobrun/",
    "alerts": "/admin/scheduler_app/alert/",
    "alert-rules": "/admin/scheduler_app/alertrule/",
    "audit": "/admin/scheduler_app/auditevent/",
}


def test_every_console_page_fits_1280_px(chromium, live_server, seeded):
    """No page scrolls sideways at 1,280 px and no chart's label falls outside its chart;
    a screenshot of each for a person to look at."""
    # A long tenant/job name and a long error on the ledger's first page.
    tenant = services.tenant_create(slug="northwind-logistics", name="Northwind", timezone="UTC")
    long = services.job_create(
        tenant,
        services.JobSpec(
            name="nightly-invoice-export-for-all-regions", task_name="scheduler_app.echo", cron="0 3 * * *"
        ),
    )
    at = db_now()
    JobRun.objects.create(
        job=long,
        tenant=tenant,
        scheduled_at=at,
        created_at=at,
        state=RunState.FAILED,
        attempt=3,
        started_at=at + timedelta(seconds=1),
        finished_at=at + timedelta(seconds=75),
        error="psycopg.errors.QueryCanceled: canceling statement due to statement timeout " * 4,
    )
    Alert.objects.create(
        job=seeded,
        tenant=seeded.tenant,
        kind=AlertKind.FAILED,
        dedup_key="failed:1",
        message="demo/flaky: run 12 ended dead: RuntimeError: upstream answered 503 " * 3,
        raised_at=db_now(),
    )
    login(chromium, live_server)
    for name, path in PAGES.items():
        chromium.get(f"{live_server.url}{path.format(job=seeded.pk)}")
        chromium.screenshot(ARTIFACTS / f"{name}.png")
        seen = chromium.js("""
            const outside = [];
            for (const svg of document.querySelectorAll('svg')) {
                const frame = svg.getBoundingClientRect();
                for (const text of svg.querySelectorAll('text')) {
                    const box = text.getBoundingClientRect();
                    if (box.left < frame.left - 0.5 || box.right > frame.right + 0.5) outside.push(text.textContent);
                }
            }
            // A panel that scrolls sideways hides part of what it holds.
            const scrolling = [...document.querySelectorAll('.cf-panel, #changelist .results')]
                .filter(panel => panel.scrollWidth > panel.clientWidth + 1).map(panel => panel.id || panel.className);
            const filled = [...document.querySelectorAll('polyline')]
                .filter(line => getComputedStyle(line).fill !== 'none').length;
            return {page: document.documentElement.scrollWidth, view: window.innerWidth, outside: outside,
                    scrolling: scrolling, filled: filled};""")
        assert seen["page"] <= seen["view"] and not seen["outside"], (name, seen)
        assert not seen["scrolling"] and not seen["filled"], (name, seen)
