"""Cronfleet as a backend of Django's task API (`django.tasks`; the `django-tasks` backport on
Django 5.2): CronfleetBackend for TASKS, and `periodic` to declare a task's schedule in code.
docs/django-tasks.md shows both. Imports downward only: the services and the models.
"""

from scheduler_app.djangotasks.backend import CronfleetBackend
from scheduler_app.djangotasks.periodic import periodic

__all__ = ["CronfleetBackend", "periodic"]
