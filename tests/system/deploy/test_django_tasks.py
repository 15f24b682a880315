"""The adoption project (test_adoption.py) with Django's task API on Cronfleet's backend, as
docs/django-tasks.md sets it up: the wheel with its `tasks` extra, TASKS naming
CronfleetBackend, an app whose tasks module defines django.tasks tasks and declares two
periodic ones, `schedules apply`, two runbeats and the host's own Celery worker.

What it proves: every enqueue runs once and every periodic fire runs once (each appends its
fire key to a file: no key twice), a deferred task runs after its time, get_result gives the
value and the status, and a failing task retries and ends dead as its policy says (two
attempts, both errors kept). On Django 5.2 with the backport and on 6.0 with django.tasks.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess

import pytest
import redis

from tests.conftest import wait_for
from tests.system.deploy.test_adoption import (  # noqa: F401 - wheel and database are fixtures
    REDIS,
    Host,
    database,
    find_python,
    make_host,
    wheel,
)

# Most of its time is a new virtual environment and its installs (two minutes and more on a
# loaded machine): a bound above the suite's 300 s, as a safety net, not a figure.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

CALLS = 6  # enqueued calls of shop.tasks.record
FIRES = 3  # fires of each periodic task the test waits for

SHOP_TASKS = """\
from django.conf import settings

try:
    from django.tasks import task  # Django 6.0
except ImportError:
    from django_tasks import task  # Django 5.2 and the backport

from scheduler_app.djangotasks import periodic
from scheduler_app.fire import current_fire


def note(*words):
    with open(settings.SHOP_LEDGER, "a") as out:
        out.write(" ".join(str(word) for word in words) + "\\n")


@task
def record(label):
    note("record", label, current_fire().fire_key)
    return label.upper()


@task(takes_context=True)
def always_fails(context):
    note("fails", current_fire().fire_key, context.attempt)
    raise RuntimeError("the shop is closed")


@periodic(every=2)
@task
def tick():
    note("tick", current_fire().fire_key)


@periodic(every=3, name="tock", max_attempts=1)
@task(takes_context=True)
def tock(context):
    note("tock", current_fire().fire_key)
    return context.attempt
"""

SETTINGS = """
# --- django.tasks on Cronfleet ---
INSTALLED_APPS += ["shop"]
SHOP_LEDGER = "{ledger}"
TASKS = {{"default": {{"BACKEND": "scheduler_app.djangotasks.CronfleetBackend",
                     "OPTIONS": {{"TENANT": "host", "MAX_ATTEMPTS": 2, "RETRY_BACKOFF_SECONDS": 1}}}}}}
"""

ENQUEUE = """\
import json
from datetime import timedelta
from django.db import transaction
from django.utils import timezone
from shop.tasks import always_fails, record

with transaction.atomic():
    ids = {{f"call{{i}}": record.enqueue(f"call{{i}}").id for i in range({calls})}}
later = timezone.now() + timedelta(seconds=4)
ids["deferred"] = record.using(run_after=later).enqueue("deferred").id
ids["fails"] = always_fails.enqueue().id
print("IDS " + json.dumps({{"ids": ids, "run_after": later.isoformat()}}))
"""

RESULTS = """\
import json
from shop.tasks import record

found = {{}}
for label, result_id in json.loads('{ids}').items():
    result = record.get_backend().get_result(result_id)
    found[label] = {{
        "status": str(result.status),
        "value": result.return_value if result.status == "SUCCESSFUL" else None,
        "attempts": result.attempts,
        "errors": [error.exception_class_path for error in result.errors],
        "traceback": result.errors[-1].traceback if result.errors else "",
        "started_at": result.started_at.isoformat() if result.started_at else None,
    }}
print("RESULTS " + json.dumps(found))
"""


def run_manage(host: Host, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(host.venv / "bin" / "python"), "manage.py", *args],
        cwd=host.site,
        env=host.env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def printed(output: str, marker: str):
    return json.loads(output.split(marker, 1)[1].strip().splitlines()[0])


def ledger(host: Host) -> dict[str, list[list[str]]]:
    path = host.home / "shop-ledger.txt"
    found: dict[str, list[list[str]]] = {}
    for line in filter(None, path.read_text().split("\n") if path.exists() else []):
        kind, *rest = line.split(" ")
        found.setdefault(kind, []).append(rest)
    return found


@pytest.mark.parametrize(
    ("python_minor", "django"), [("3.11", ">=5.2,<6.0"), ("3.12", ">=6.0,<6.1")], ids=["django-5.2", "django-6.0"]
)
def test_a_host_project_runs_its_django_tasks_once_each_and_its_periodic_tasks_once_per_fire(
    python_minor, django, wheel, database, tmp_path
):
    python = find_python(python_minor)
    if python is None:
        pytest.skip(f"Python {python_minor} is not installed (pyenv install {python_minor})")
    host = make_host(tmp_path, python, django, wheel, database)
    host.pip("install", "--quiet", f"{wheel}[tasks]", f"Django{django}", timeout=600)
    (host.site / "shop").mkdir()
    (host.site / "shop" / "__init__.py").write_text("")
    (host.site / "shop" / "tasks.py").write_text(SHOP_TASKS)
    with (host.site / "hostsite" / "settings.py").open("a") as settings:
        settings.write(SETTINGS.format(ledger=host.home / "shop-ledger.txt"))
    try:
        host.manage("check")
        host.manage("migrate", "--no-input", timeout=300)
        host.manage("tenants", "add", "host", "--name", "Host")

        plan = run_manage(host, "schedules", "plan")
        assert plan.returncode == 2, plan.stdout + plan.stderr  # changes to apply
        assert "code:shop.tasks" in plan.stdout and "+ create host/shop.tasks.tick" in plan.stdout, plan.stdout
        assert "+ create host/tock" in plan.stdout, plan.stdout
        host.manage("schedules", "apply")
        assert run_manage(host, "schedules", "plan").returncode == 0

        enqueued = printed(host.manage("shell", "-c", ENQUEUE.format(calls=CALLS)), "IDS ")
        ids = enqueued["ids"]

        beats, _worker = host.start_fleet()

        def results() -> dict:
            return printed(host.manage("shell", "-c", RESULTS.format(ids=json.dumps(ids))), "RESULTS ")

        def finished() -> dict | None:
            found = results()
            done = all(entry["status"] in ("SUCCESSFUL", "FAILED") for entry in found.values())
            fired = all(len(ledger(host).get(kind, [])) >= FIRES for kind in ("tick", "tock"))
            return found if done and fired else None

        found = wait_for(finished, timeout=180, interval=1, what="every call finished and the periodic fires")
        for beat in beats:
            os.killpg(beat.pid, signal.SIGTERM)
        for beat in beats:
            beat.wait(timeout=30)
            assert beat.returncode == 0, host.log(beat)

        # Every call ran once, and get_result gives its value and status.
        recorded = ledger(host)
        labels = [label for label, _ in recorded["record"]]
        assert sorted(labels) == sorted([f"call{i}" for i in range(CALLS)] + ["deferred"])
        for label in [f"call{i}" for i in range(CALLS)] + ["deferred"]:
            assert (found[label]["status"], found[label]["value"], found[label]["attempts"]) == (
                "SUCCESSFUL",
                label.upper(),
                1,
            )
        assert found["deferred"]["started_at"] >= enqueued["run_after"]
        # The failing call: two attempts by its policy, then dead; both errors kept.
        assert found["fails"]["status"] == "FAILED"
        assert found["fails"]["attempts"] == 2
        assert found["fails"]["errors"] == ["builtins.RuntimeError", "builtins.RuntimeError"]
        assert "the shop is closed" in found["fails"]["traceback"]
        assert [attempt for _, attempt in recorded["fails"]] == ["1", "2"]
        assert len({key for key, _ in recorded["fails"]}) == 1  # one fire, two attempts

        # Each periodic fire ran once, under two beats: no fire key twice.
        for kind in ("tick", "tock"):
            keys = [key for key, *_ in recorded[kind]]
            assert len(keys) == len(set(keys)) >= FIRES, f"{kind}: {sorted(keys)}"
    finally:
        host.stop_all()
        redis.Redis.from_url(REDIS).delete(*(redis.Redis.from_url(REDIS).keys(f"{database}:*") or [b"none"]))
