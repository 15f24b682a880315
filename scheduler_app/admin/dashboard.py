"""The staff dashboard at dashboard/ under the prefix a project includes Cronfleet's URLs at
(scheduler_app/urls.py, name cronfleet:dashboard; /admin/dashboard/ in Cronfleet's own
deployment), linked from the app's section of the admin; one tenant's at ?tenant=<slug>,
linked from the tenant's page and the noisiest tenants. A staff page of the default admin
site (its login, its header), rendered with the site's context. Charts
of the last hour and day, the next hour's forecast, top failing jobs, noisiest tenants; numbers from
scheduler_app/observability/dashboard.py, charts as server-rendered SVG (scheduler_app/admin/charts.py).

The fleet panels (beats and workers with their heartbeats, the due backlog, runs in flight,
each broker queue's depth and the live workers consuming it) come from cluster.snapshot(),
the same reading as /metrics and `manage.py status`: one broker connection for every queue.
A broker that does not answer is said on the page; the rest of the page still renders.

The objectives panel shows each fleet objective's attainment and error budget left over its
window (admin/objectives.objective_rows); without view_objective it says so instead.

It shows runs, failing jobs, alerts' texts, tenants and nodes: a staff user without the view
permission of any of these gets a 403 page naming what is missing (as the admin's own lists
would refuse them), not a dashboard with some panels silently empty.

On the embedded SQLite demo the same panels are computed in Python from the last day's runs
(observability.dashboard.overview_in_python); the page says so in one line (SQLITE_NOTE).
"""

from __future__ import annotations

import time

from django.contrib import admin
from django.db import connection
from django.template.response import TemplateResponse
from django.urls import NoReverseMatch, reverse

from scheduler_app.admin import charts
from scheduler_app.admin.alerts import dashboard_alerts
from scheduler_app.admin.common import when
from scheduler_app.admin.objectives import VIEW_PERMISSION as VIEW_OBJECTIVE
from scheduler_app.admin.objectives import objective_rows
from scheduler_app.admin.pauses import paused_panel
from scheduler_app.admin.windows import open_windows
from scheduler_app.models import Alert, Job, JobRun, Node, Tenant, db_now
from scheduler_app.observability import cluster, dashboard
from scheduler_app.observability.errors import answers_server_errors
from scheduler_app.observability.nodes import flight_of


def fleet_panel() -> dict:
    """Beats and workers, the due backlog, runs in flight and the broker queues, now."""
    found = cluster.snapshot()
    depths = found.queue_depths or {}
    return {
        "nodes": [
            {
                "kind": s.node.kind,
                "name": s.node.name,
                "state": s.state,
                "age": f"{s.age:.0f} s",
                "activity": s.node.activity,
                "http": flight_of(s.node.activity),
            }
            for s in found.nodes
        ],
        "queues": [
            {"name": queue, "depth": depths.get(queue), "workers": workers}
            for queue, workers in sorted(found.queue_workers.items())
        ],
        "unconsumed": found.unconsumed,
        "broker_error": found.broker_error,
        "due": f"{found.due_jobs:,}{'+' if found.due_capped else ''}",
        "oldest_due": f"{found.oldest_due_seconds:.1f} s",
        "in_flight": found.in_flight,
        "waiting": found.waiting,
    }


# What the page shows, by the models whose admin lists would show the same.
DASHBOARD_PERMISSIONS = tuple(
    f"{Tenant._meta.app_label}.view_{model._meta.model_name}" for model in (JobRun, Job, Alert, Tenant, Node)
)


SQLITE_NOTE = "Embedded SQLite demo: these figures are computed in Python from the last 24 hours of runs."


@answers_server_errors
def dashboard_view(request):
    """The fleet's dashboard, or one tenant's (?tenant=<slug>)."""
    began = time.perf_counter()
    now = db_now()
    context = {
        **admin.site.each_context(request),
        "title": "Dashboard",
        "now": when(now),
        "supported": True,
        "tenant": None,
        "engine_note": SQLITE_NOTE if connection.vendor != "postgresql" else "",
    }
    lacking = [name for name in DASHBOARD_PERMISSIONS if not request.user.has_perm(name)]
    if lacking:
        context.update(
            supported=False,
            error=f"The dashboard shows runs, failing jobs, alerts, tenants and nodes: "
            f"it needs the permissions {', '.join(lacking)}.",
        )
        return TemplateResponse(request, "admin/cronfleet_dashboard.html", context, status=403)
    slug = request.GET.get("tenant", "").strip()
    if slug:
        context["tenant"] = Tenant.objects.filter(slug=slug).first()
        if context["tenant"] is None:
            context.update(supported=False, error=f"tenant: there is no tenant {slug!r}")
            return TemplateResponse(request, "admin/cronfleet_dashboard.html", context, status=404)
        context["title"] = f"Dashboard of tenant {slug}"
    if context["supported"]:
        found = dashboard.overview(now, context["tenant"].pk if context["tenant"] else None)
        step = dashboard.MINUTE
        hour = (found.hour_minutes[0], now)  # the past's axes end at now
        day = (found.day_start or found.day_buckets[0], now)
        context.update(
            found=found,
            runs_hour=charts.stacked_bars(
                "Runs finished per minute, last hour",
                found.hour_minutes,
                finished_series(found.hour_counts),
                step=step,
                unit="succeeded, failed or dead",
                axis=hour,
            ),
            lag_hour=charts.lines(
                "Start lag per minute, last hour",
                found.hour_minutes,
                [charts.Series("p50", found.hour_p50), charts.Series("p99", found.hour_p99)],
                step=step,
                unit="seconds, fire time to a worker's start",
                axis=hour,
            ),
            dispatch_hour=charts.lines(
                "Dispatch lag per minute, last hour",
                found.hour_minutes,
                [charts.Series("p50", found.hour_dispatch_p50), charts.Series("p99", found.hour_dispatch_p99)],
                step=step,
                unit="seconds, fire time to the broker",
                axis=hour,
            ),
            runs_day=charts.stacked_bars(
                "Runs finished per quarter hour, last 24 hours",
                found.day_buckets,
                finished_series(found.day_counts),
                step=dashboard.DAY_BUCKET,
                unit="succeeded, failed or dead",
                axis=day,
            ),
            failure_day=charts.lines(
                "Failure rate, last 24 hours",
                found.day_buckets,
                [charts.Series("rate", found.day_failure_rate)],
                step=dashboard.DAY_BUCKET,
                unit="% of finished runs (failed + dead)",
                axis=day,
            ),
            forecast=charts.stacked_bars(
                "Fires due per minute, next 60 minutes",
                found.forecast_minutes,
                [charts.Series("fires", found.forecast)],
                step=step,
                unit="from the schedules",
            ),
            failing=[
                {
                    "job": f"{slug}/{name}",
                    "href": reverse("admin:scheduler_app_job_change", args=[job_id]),
                    "failures": failures,
                    "last": when(last),
                }
                for job_id, slug, name, failures, last in found.failing_jobs
            ],
            fleet=fleet_panel(),
            alerts=dashboard_alerts(now, context["tenant"].pk if context["tenant"] else None),
            maintenance=open_windows(now, context["tenant"].pk if context["tenant"] else None),
            objectives=objective_rows(now, context["tenant"].pk if context["tenant"] else None)
            if request.user.has_perm(VIEW_OBJECTIVE)
            else None,
            view_objective=VIEW_OBJECTIVE,
            paused=paused_panel(now, context["tenant"].pk if context["tenant"] else None),
        )
    context["render_ms"] = round((time.perf_counter() - began) * 1000)
    return TemplateResponse(request, "admin/cronfleet_dashboard.html", context)


def dashboard_url() -> str | None:
    """The dashboard's path; None in a project that did not include Cronfleet's URLs, whose
    admin pages then just go without a link to it."""
    try:
        return reverse("cronfleet:dashboard")
    except NoReverseMatch:
        return None


def finished_series(counts: dict[str, list]) -> list[charts.Series]:
    """The finished outcomes (succeeded, failed, dead) that occur: the runs the totals count."""
    return [charts.Series(state, counts[state]) for state in dashboard.FINISHED if any(counts[state])]
