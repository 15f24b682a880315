"""A schedules file's problems all at once (issue 41): every problem of a job (a bad cron and
a bad zone both, not the zone alone), the problems of several jobs together, every unknown
field, and nothing written."""

from __future__ import annotations

from scheduler_app.models import Job
from tests.integration.services.test_schedules_as_code import acme, declare, run  # noqa: F401 (fixtures)

BAD = """
owner = "ops"
tenant = "acme"

[[jobs]]
name = "a"
cron = "0 25 * * *"
timezone = "Moon/Base"
task = "scheduler_app.echo"
max_attempts = 0

[[jobs]]
name = "b"
every = 0
task = "scheduler_app.echo"

[[jobs]]
name = "c"
cron = "0 1 * * *"
task = "scheduler_app.echo"
"""


def test_every_problem_of_every_job_is_reported_and_nothing_written(acme, declare):
    code, out = run("apply", "--file", (path := declare(BAD)))

    assert code == 1
    problems = out.splitlines()[1:]
    assert problems == [
        f"  {path}: job acme/a: timezone: unknown time zone 'Moon/Base'",
        f"  {path}: job acme/a: cron: Bad hour in '0 25 * * *'",
        f"  {path}: job acme/a: max_attempts: must be between 1 and 100",
        f"  {path}: job acme/b: every: must be between 1 and 316224000 seconds",
    ], out
    assert not Job.objects.exists()


def test_every_unknown_field_of_a_job_is_named(acme, declare):
    code, out = run("plan", "--file", (path := declare(BAD.replace('name = "c"', 'name = "c"\nprio = 3\ncolour = 1'))))

    assert code == 1
    assert f"{path}: job 'c': colour: is not a job field" in out and f"{path}: job 'c': prio: is not a job field" in out
