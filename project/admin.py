"""This deployment's admin: Cronfleet's name and look on Django's default admin site.

The app (scheduler_app) registers its own models and leaves the site alone, as an app
installed in another project must. Here the whole admin is Cronfleet's, so the site gets its
name, the dashboard as its index's first link and as "View site", and loses the pages of the
two Celery apps this deployment installs for other reasons.

project/ is not an installed app, so the admin's autodiscovery does not import this module:
project/urls.py does, before it builds the admin's URLs (the hidden models then get no routes)
and so before any admin page is served.
"""

from __future__ import annotations

from django.apps import apps
from django.contrib import admin
from django.urls import reverse_lazy

# django_celery_beat is installed so that manage.py import_beat can read its tables; its admin
# pages would invite editing PeriodicTasks that nothing in a Cronfleet deployment runs.
# django_celery_results' section was always empty: Cronfleet's tasks ignore their results
# (a run's outcome is in the ledger). Either may be left out of INSTALLED_APPS.
for app_label in ("django_celery_beat", "django_celery_results"):
    if not apps.is_installed(app_label):
        continue
    for model in apps.get_app_config(app_label).get_models():
        if admin.site.is_registered(model):
            admin.site.unregister(model)

# The index links to the dashboard (scheduler_app/admin/dashboard.py) above the app list.
admin.site.index_template = "admin/cronfleet_index.html"
# No navigation sidebar: its 300 px are what the run ledger needs to fit 1,280 px.
admin.site.enable_nav_sidebar = False
# Cronfleet's names in the title bar and the header, not "Django administration".
admin.site.site_header = "Cronfleet"
admin.site.site_title = "Cronfleet"
admin.site.index_title = "Cronfleet administration"
# "View site" would point at / (a 404: this deployment serves no pages outside the admin and
# the API); the header's link goes to the dashboard instead.
admin.site.site_url = reverse_lazy("cronfleet:dashboard")
