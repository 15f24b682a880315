"""Routes of the API, mounted as api/v1/ by the URLconf that includes them (the app's, under
whatever prefix the host picks, or the standalone project's), with docs.SchemaView and
docs.DocsView beside them and handler.no_route mapped last for unknown paths under api/."""

from django.urls import path, re_path
from rest_framework.routers import SimpleRouter

from scheduler_app.api import alerts, calendars, objectives, pauses, retention, tenants, views
from scheduler_app.api import windows as maintenance_windows

router = SimpleRouter()
router.register("tenants", tenants.TenantViewSet, basename="tenant")
router.register("keys", tenants.ApiKeyViewSet, basename="apikey")
router.register("jobs", views.JobViewSet, basename="job")
router.register("runs", views.RunViewSet, basename="run")
router.register("alerts", alerts.AlertViewSet, basename="alert")
router.register("calendars", calendars.CalendarViewSet, basename="calendar")
router.register("windows", maintenance_windows.WindowViewSet, basename="window")
router.register("objectives", objectives.ObjectiveViewSet, basename="objective")
router.register("pause-requests", pauses.PauseRequestViewSet, basename="pauserequest")

urlpatterns = [
    path("me", tenants.MeView.as_view(), name="me"),
    # The same with the slash every other route has (a GET only: nothing is posted to it);
    # left out of the schema, which documents /me once.
    path("me/", tenants.MeView.as_view(schema=None), name="me-slash"),
    path("preview/", views.SchedulePreviewView.as_view(), name="preview"),
    path("stats/", views.StatsView.as_view(), name="stats"),
    path("paused/", pauses.PausedJobsViewSet.as_view({"get": "list"}), name="paused"),
    path("pauses/", pauses.PauseManyView.as_view(), name="pauses"),
    # Beside the router's routes, with its pattern for the object's key.
    re_path(r"^tenants/(?P<slug>[^/.]+)/retention/$", retention.TenantRetentionView.as_view(), name="tenant-retention"),
    re_path(r"^jobs/(?P<id>[^/.]+)/retention/$", retention.JobRetentionView.as_view(), name="job-retention"),
    re_path(r"^jobs/(?P<id>[^/.]+)/alerts/$", alerts.JobAlertRuleView.as_view(), name="job-alerts"),
    *router.urls,
]
