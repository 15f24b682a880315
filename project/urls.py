"""The standalone deployment's URLs: Cronfleet's (scheduler_app/urls.py) at the root, so the
API is at /api/v1/, the check-ins at /ping/..., /healthz, /readyz and /metrics, and the admin
at /admin/ with the dashboard inside it at /admin/dashboard/, as they have always been, and
the check-ins page at /admin/checkins/; / redirects to the dashboard.

A host project includes the app's URLs under a prefix of its choice instead
(path("cron/", include("scheduler_app.urls"))) and keeps its own admin's look.
"""

from django.contrib import admin
from django.urls import include, path, reverse_lazy
from django.views.generic import RedirectView

import project.admin  # noqa: F401 (Cronfleet's look on the admin site, before admin.site.urls below)
from scheduler_app import urls as cronfleet
from scheduler_app.api.handler import not_found
from scheduler_app.observability.errors import server_error

urlpatterns = [
    # Before admin/: the admin's catch-all would take admin/dashboard/ and admin/checkins/.
    path(
        "",
        include((cronfleet.patterns(dashboard="admin/dashboard/", checkins="admin/checkins/"), cronfleet.app_name)),
    ),
    path("admin/", admin.site.urls),
    # This deployment serves no page outside the admin: / opens the dashboard (its login first).
    path("", RedirectView.as_view(url=reverse_lazy("cronfleet:dashboard")), name="home"),
]

# Unknown URLs under /api/ answer in the API's error shape; others get Django's page.
handler404 = not_found
# Every 500 page shows the id its error is logged under (scheduler_app/observability/errors.py),
# the admin's included; the API's answer is JSON with the same id (ApiErrorMiddleware).
handler500 = server_error
