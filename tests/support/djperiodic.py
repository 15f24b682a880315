"""Periodic django.tasks tasks (tests/integration/djangotasks/test_periodic.py imports this
module in a fixture that puts the registry back afterwards: schedules as code reads every
declaration registered in the process, and other tests' plans must not see these)."""

from scheduler_app import taskapi
from scheduler_app.djangotasks import periodic

task = taskapi.require().task


@periodic(cron="0 3 * * *", timezone="Europe/Paris", max_attempts=5)
@task
def nightly():
    return "night"


@periodic(every=60, name="minutely-sum", args=[1, 2])
@task
def summed(a, b):
    return a + b
