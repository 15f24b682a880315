"""django.tasks tasks on Cronfleet's backend (tests/settings.py's TASKS), for the tests of
scheduler_app/djangotasks."""

from scheduler_app import taskapi
from scheduler_app.fire import current_fire

task = taskapi.require().task


@task
def add(a, b):
    return a + b


@task(takes_context=True, priority=50, queue_name="reports")
def describe(context, label):
    fire = current_fire()
    return {
        "label": label,
        "attempt": context.attempt,
        "result_id": context.task_result.id,
        "fire_key": fire.fire_key if fire else None,
    }


@task
def boom():
    raise ValueError("boom went the task")
