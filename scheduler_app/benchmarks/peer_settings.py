"""Settings for `bench peers`' django-celery-beat process: the project's settings with
django_celery_beat installed (its tables are migrated into the bench database by the bench).
Nothing else uses them."""

from project.settings import *  # noqa: F403

if "django_celery_beat" not in INSTALLED_APPS:  # noqa: F405 (the project installs it for import_beat)
    INSTALLED_APPS = [*INSTALLED_APPS, "django_celery_beat"]  # noqa: F405
