"""A host project's URLconf (tests/{unit,integration,system}/admin/test_host_admin_urls.py): its
admin at /admin/ and Cronfleet under /cron/, as a project that installs the app would write it."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("cron/", include("scheduler_app.urls")),
]
