"""Cronfleet's routes, for a project to include under any prefix:

    path("cron/", include("scheduler_app.urls"))

Their names are in the namespace "cronfleet" (app_name below), so every reverse in the app
carries the project's prefix: cronfleet:dashboard, cronfleet:checkins, cronfleet:healthz, cronfleet:readyz,
cronfleet:metrics, cronfleet:ping (and ping-signal, ping-cell, ping-cell-signal),
cronfleet:schema, cronfleet:docs, and the API's under cronfleet:api (cronfleet:api:job-list).

The dashboard and the check-ins page are staff pages inside the project's default admin site
(its login, its permissions, its header). Cronfleet's own deployment keeps them under /admin/:
project/urls.py includes patterns(dashboard="admin/dashboard/", checkins="admin/checkins/").

Whatever else is under api/ answers the API's JSON 404 (api/handler.py's no_route); the
catch-all is limited to the prefix, so the project's other URLs keep their own 404.
"""

from django.contrib import admin
from django.urls import include, path, re_path

from scheduler_app.admin.checkins import checkins_view
from scheduler_app.admin.dashboard import dashboard_view
from scheduler_app.api.docs import DocsView, SchemaView
from scheduler_app.api.handler import no_route
from scheduler_app.api.pings import ping
from scheduler_app.cells import CELL_NAME
from scheduler_app.observability import health

app_name = "cronfleet"

UUID = "[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}"


def patterns(dashboard: str = "dashboard/", checkins: str = "checkins/") -> list:
    """The routes, the dashboard's at `dashboard` and the check-ins page's at `checkins`
    (relative to the include's prefix)."""
    return [
        path(dashboard, admin.site.admin_view(dashboard_view), name="dashboard"),
        path(checkins, admin.site.admin_view(checkins_view), name="checkins"),
        path("healthz", health.healthz, name="healthz"),
        path("readyz", health.readyz, name="readyz"),
        path("metrics", health.metrics_view, name="metrics"),
        # Check-ins of monitored jobs (docs/check-ins.md): ping/<key>, /start, /fail, /<exit status>;
        # from a named cell ping/<cell>/<key>[/...] (the cell is for the routing proxy).
        re_path(rf"^ping/(?P<cell>{CELL_NAME})/(?P<key>{UUID})$", ping, name="ping-cell"),
        re_path(rf"^ping/(?P<cell>{CELL_NAME})/(?P<key>{UUID})/(?P<action>[^/]+)$", ping, name="ping-cell-signal"),
        path("ping/<str:key>", ping, name="ping"),
        path("ping/<str:key>/<str:action>", ping, name="ping-signal"),
        path("api/v1/", include(("scheduler_app.api.urls", "api"))),
        # The schema describes the API's views only, at the paths they are mounted under
        # (api/docs.py); the docs page finds it by its name here, cronfleet:schema.
        path("api/schema/", SchemaView.as_view(), name="schema"),
        path("api/docs/", DocsView.as_view(), name="docs"),
        # Last: whatever else is under api/ answers the API's JSON 404 (handler.no_route).
        re_path(r"^api/", no_route),
    ]


urlpatterns = patterns()
