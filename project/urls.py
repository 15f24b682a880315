from django.contrib import admin
from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from scheduler_app.admin.dashboard import dashboard_view
from scheduler_app.api.handler import no_route, not_found
from scheduler_app.api.pings import ping
from scheduler_app.cells import CELL_NAME
from scheduler_app.observability import health

UUID = "[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}"

urlpatterns = [
    path("admin/dashboard/", admin.site.admin_view(dashboard_view), name="cronfleet_dashboard"),
    path("admin/", admin.site.urls),
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("metrics", health.metrics_view, name="metrics"),
    # Check-ins of monitored jobs (docs/check-ins.md): /ping/<key>, /start, /fail, /<exit status>;
    # from a named cell /ping/<cell>/<key>[/...] (the cell is for the routing proxy).
    re_path(rf"^ping/(?P<cell>{CELL_NAME})/(?P<key>{UUID})$", ping, name="ping-cell"),
    re_path(rf"^ping/(?P<cell>{CELL_NAME})/(?P<key>{UUID})/(?P<action>[^/]+)$", ping, name="ping-cell-signal"),
    path("ping/<str:key>", ping, name="ping"),
    path("ping/<str:key>/<str:action>", ping, name="ping-signal"),
    path("api/v1/", include(("scheduler_app.api.urls", "api"))),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="docs"),
    # Last: whatever else is under /api/ answers the API's JSON 404 (handler.no_route).
    re_path(r"^api/", no_route),
]

# Unknown URLs under /api/ answer in the API's error shape; others get Django's page.
handler404 = not_found
