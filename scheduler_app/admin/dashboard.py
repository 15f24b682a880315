"""The staff dashboard at /admin/dashboard/ (linked from the admin's index; one tenant's at
/admin/dashboard/?tenant=<slug>, linked from the tenant's page and the noisiest tenants): charts
of the last hour and day, the next hour's forecast, top failing jobs, noisiest tenants; numbers from
scheduler_app/dashboard.py, charts as server-rendered SVG (scheduler_app/charts.py).

Two panels are kept for the observability work: live beats and workers (scheduler_app.nodes,
used when that module is there) and queue depths (publish.queue_depths, to come with it).
"""

from __future__ import annotations

import importlib.util
import time

from django.contrib import admin
from django.db import connection
from django.template.response import TemplateResponse
from django.urls import reverse

from scheduler_app import charts, dashboard
from scheduler_app.admin.common import when
from scheduler_app.models import Tenant, db_now


def node_panel(now) -> dict:
    """Live beats and workers from scheduler_app.nodes (the observability work), if present."""
    if importlib.util.find_spec("scheduler_app.nodes") is None:
        return {"available": False}
    from scheduler_app import nodes  # present once the observability work lands

    states = nodes.node_states(now)
    return {"available": True, "rows": [{"kind": s.node.kind, "name": s.node.name, "state": s.state,
                                        "age": f"{s.age:.0f} s", "activity": s.node.activity} for s in states]}


def dashboard_view(request):
    """The fleet's dashboard, or one tenant's (?tenant=<slug>)."""
    began = time.perf_counter()
    now = db_now()
    context = {**admin.site.each_context(request), "title": "Dashboard", "now": when(now),
               "supported": connection.vendor == "postgresql", "tenant": None}
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
        context.update(
            found=found,
            runs_hour=charts.stacked_bars("Runs finished per minute, last hour", found.hour_minutes,
                                          series(found.hour_counts), step=step, unit="runs by outcome"),
            lag_hour=charts.lines("Start lag per minute, last hour", found.hour_minutes,
                                  [charts.Series("p50", found.hour_p50), charts.Series("p99", found.hour_p99)],
                                  step=step, unit="seconds"),
            runs_day=charts.stacked_bars("Runs finished per minute, last 24 hours", found.day_buckets,
                                         series(found.day_counts), step=dashboard.DAY_BUCKET,
                                         unit="per 15 min, averaged"),
            failure_day=charts.lines("Failure rate, last 24 hours", found.day_buckets,
                                     [charts.Series("rate", found.day_failure_rate)], step=dashboard.DAY_BUCKET,
                                     unit="% of finished runs (failed + dead)"),
            forecast=charts.stacked_bars("Fires due per minute, next 60 minutes", found.forecast_minutes,
                                         [charts.Series("fires", found.forecast)], step=step, unit="from the schedules"),
            failing=[{"job": f"{slug}/{name}", "href": reverse("admin:scheduler_app_job_change", args=[job_id]),
                      "failures": failures, "last": when(last)} for job_id, slug, name, failures, last in
                     found.failing_jobs],
            day_covered=round(found.day_covered * 100),
            nodes=node_panel(now),
        )
    context["render_ms"] = round((time.perf_counter() - began) * 1000)
    return TemplateResponse(request, "admin/cronfleet_dashboard.html", context)


def series(counts: dict[str, list]) -> list[charts.Series]:
    return [charts.Series(state, values) for state, values in counts.items() if any(values)]
