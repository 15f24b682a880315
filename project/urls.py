from django.contrib import admin
from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from scheduler_app.admin.dashboard import dashboard_view
from scheduler_app.api.handler import no_route, not_found
from scheduler_app.api.pings import ping
from scheduler_app.observability import health

urlpatterns = [
    path("admin/dashboard/", admin.site.admin_view(dashboard_view), name="cronfleet_dashboard"),
    path("admin/", admin.site.urls),
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("metrics", health.metrics_view, name="metrics"),
    # Check-ins of monitored jobs (docs/check-ins.md): /ping/<key>, /start, /fail, /<exit status>.
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
