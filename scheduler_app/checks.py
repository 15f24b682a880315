"""Cronfleet's system checks (`manage.py check`, and every command that runs checks): a
setting of the wrong type, out of range, or at odds with another, named with what to do.
`runbeat` and the worker step run the same checks before they start (conf.problems)."""

from __future__ import annotations

from django.core import checks

from scheduler_app.conf import setting_errors


@checks.register("cronfleet")
def check_settings(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    return [
        checks.Error(
            f"{name} {message}",
            hint="docs/settings.md lists every setting and its default",
            id="cronfleet.E001",
            obj=name,
        )
        for name, message in setting_errors()
    ]


@checks.register("cronfleet")
def check_apps(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """The API's docs page (api/docs/) renders drf-spectacular's template, which Django finds
    only in an installed app."""
    from django.apps import apps  # here: beside its only use

    if apps.is_installed("drf_spectacular"):
        return []
    return [
        checks.Warning(
            "the API's docs page (api/docs/ under Cronfleet's URLs) needs drf-spectacular's "
            "templates; without them it answers 500",
            hint='add "drf_spectacular" to INSTALLED_APPS',
            id="cronfleet.W001",
        )
    ]


@checks.register("cronfleet")
def check_celery(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """What a worker-wide Celery option of the host's app costs Cronfleet's runs. Its own tasks
    carry acks_late and reject_on_worker_lost themselves; prefetching is the worker's alone."""
    from celery import current_app  # here: the host's Celery app is made after the settings load

    prefetch = current_app.conf.worker_prefetch_multiplier
    if prefetch and prefetch > 1:
        return [
            checks.Info(
                f"Celery's worker_prefetch_multiplier is {prefetch}: each worker process holds up to {prefetch} "
                "messages, so a run can wait behind a long one in the same process while other workers are idle",
                hint="set worker_prefetch_multiplier = 1 (CELERY_WORKER_PREFETCH_MULTIPLIER) on the workers that "
                "consume Cronfleet's queue, or give them a Celery app of their own",
                id="cronfleet.I001",
            )
        ]
    return []
