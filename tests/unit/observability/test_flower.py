"""Celery acknowledges a failed execute_run and never retries it (so Flower's FAILURE is the
whole story: tests/system/observability/test_flower.py)."""

from __future__ import annotations

from project.celery import app


def test_celery_acknowledges_a_failed_execute_run_and_never_retries_it():
    task = app.tasks["scheduler_app.execute_run"]

    assert task.acks_late and task.acks_on_failure_or_timeout and task.reject_on_worker_lost
    assert not getattr(task, "autoretry_for", ()) and task.store_errors_even_if_ignored
