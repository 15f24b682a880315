"""Settings for `bench peers`' django-celery-beat process: the settings the bench runs on
(bench/settings.py: its base, project.settings by default) with django_celery_beat installed
(its tables are migrated into the bench database by the bench). Nothing else uses them."""

from bench.settings import *  # noqa: F403

if "django_celery_beat" not in INSTALLED_APPS:  # noqa: F405 (the project installs it for import_beat)
    INSTALLED_APPS = [*INSTALLED_APPS, "django_celery_beat"]  # noqa: F405
