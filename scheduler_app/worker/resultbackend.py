"""Cronfleet's own deployment's Celery result backend (CELERY_RESULT_BACKEND in project/settings.py):
django-celery-results' `django-db`, which logs a result it cannot write instead of raising
(results.py says why). Only a project that names it imports it, so the app itself does not
need django-celery-results installed.
"""

from __future__ import annotations

import logging

from django_celery_results.backends.database import DatabaseBackend

from scheduler_app.worker.results import UNREACHABLE, first_line

logger = logging.getLogger("scheduler_app.worker.results")


class LedgerFirstBackend(DatabaseBackend):
    """django-celery-results' backend, which logs a result it could not write instead of
    raising: the ledger, not this table, says how a run ended."""

    def _store_result(self, task_id, result, status, *args, **kwargs):
        try:
            return super()._store_result(task_id, result, status, *args, **kwargs)
        except UNREACHABLE as exc:
            logger.warning(
                "task %s: its %s result not written (database unreachable: %s); the run's row in the "
                "ledger says how it ended, or its lease runs out and it is retried",
                task_id,
                status,
                first_line(exc),
            )
            return result
