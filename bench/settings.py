"""Settings for `manage.py bench`: the settings the command would otherwise have run with
(the module CRONFLEET_BENCH_BASE_SETTINGS names, which manage.py sets; project.settings by
default), with the bench app installed.

The bench's child processes (beats, workers) run on BENCH_BASE_SETTINGS itself, as the
product is deployed; its django-celery-beat peer on bench.peer_settings, built on this.
"""

import importlib
import os

BENCH_BASE_SETTINGS = os.environ.get("CRONFLEET_BENCH_BASE_SETTINGS", "project.settings")

_base = importlib.import_module(BENCH_BASE_SETTINGS)
globals().update({name: getattr(_base, name) for name in dir(_base) if name.isupper()})
INSTALLED_APPS = [*_base.INSTALLED_APPS, "bench"]
# `bench tasks`: Django's task API on Cronfleet's backend, as its workers have it.
TASKS = importlib.import_module("bench.tasks_settings").TASKS
