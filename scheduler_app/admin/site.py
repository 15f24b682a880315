"""What the admin index shows besides Cronfleet's own models."""

from __future__ import annotations

from django.apps import apps
from django.contrib import admin
from django.urls import reverse_lazy

# django_celery_beat is installed so that manage.py import_beat can read its tables; its admin
# pages would invite editing PeriodicTasks that nothing in a Cronfleet deployment runs.
# django_celery_results is the result backend, but Cronfleet's tasks ignore their results
# (a run's outcome is in the ledger), so its section was always empty: hidden too.
for app_label in ("django_celery_beat", "django_celery_results"):
    for model in apps.get_app_config(app_label).get_models():
        if admin.site.is_registered(model):
            admin.site.unregister(model)

# The index links to the dashboard (/admin/dashboard/, scheduler_app/admin/dashboard.py).
admin.site.index_template = "admin/cronfleet_index.html"
# No navigation sidebar: its 300 px are what the run ledger needs to fit 1,280 px.
admin.site.enable_nav_sidebar = False
# Cronfleet's names in the title bar and the header, not "Django administration".
admin.site.site_header = "Cronfleet"
admin.site.site_title = "Cronfleet"
admin.site.index_title = "Cronfleet administration"
# "View site" pointed at / (a 404: the project serves no pages outside the admin and the
# API); the header's link goes to the dashboard instead.
admin.site.site_url = reverse_lazy("cronfleet_dashboard")
