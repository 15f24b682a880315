"""Settings for `bench tasks`' workers: the settings the bench is built on
(CRONFLEET_BENCH_BASE_SETTINGS, project.settings by default), without the bench app, plus
Django's task API on Cronfleet's backend. bench/settings.py takes TASKS from here."""

import importlib
import os

_base = importlib.import_module(os.environ.get("CRONFLEET_BENCH_BASE_SETTINGS", "project.settings"))
globals().update({name: getattr(_base, name) for name in dir(_base) if name.isupper()})

TASKS = {
    "default": {
        "BACKEND": "scheduler_app.djangotasks.CronfleetBackend",
        "QUEUES": ["default", "bench-tasks"],
        "OPTIONS": {"TENANT": "bench-tasks"},
    }
}
