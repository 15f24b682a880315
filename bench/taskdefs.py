"""The django.tasks task `bench tasks` enqueues (bench/djangotasks.py), on Cronfleet's backend
(TASKS in bench/tasks_settings.py): it does nothing, as the plain Celery floor's task does."""

from scheduler_app import taskapi

task = taskapi.require().task


@task(queue_name="bench-tasks")
def noop(number):
    return None
