"""Cronfleet added to a Django project that already has Celery and django-celery-beat, as its
team would add it (docs/your-project.md): the wheel installed into a fresh virtual environment,
one line in INSTALLED_APPS, one include(), one line in the Celery app, migrate, import_beat,
two runbeats and the host's own unchanged `celery -A hostsite worker`.

What it proves: the host's tasks run exactly once per fire (counted by fire key in a file the
task appends to); the host's admin keeps its title and django-celery-beat's pages; every API
route refuses anonymous and non-staff callers under the host's permissive DRF defaults;
`manage.py check` passes with no Cronfleet setting set but the allow-list.

Run for each Django release CI covers (5.2 on Python 3.11, 6.0 on 3.12 or newer); a Python
that is not installed skips, which CI counts as a failure.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import psycopg
import pytest
import redis

from tests.conftest import ROOT, wait_for
from tests.support.package import NOT_SOURCES

pytestmark = pytest.mark.slow

POSTGRES = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/cronfleet").rsplit("/", 1)[0]
REDIS = os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/15")
FIRES = 4  # fires of each imported entry the test waits for

# --- what the host adds (docs/your-project.md shows the same lines) --------------------------

CELERY_APP = """\
import os

from celery import Celery
from scheduler_app.worker.step import install_worker_step

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hostsite.settings")
app = Celery("hostsite")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
install_worker_step(app)  # Cronfleet: the worker's heartbeat, its queue and metrics
"""

PACKAGE_INIT = """\
from .celery import app as celery_app

__all__ = ("celery_app",)
"""

TASKS = '''\
import os

from celery import shared_task
from scheduler_app.fire import current_fire


@shared_task(name="billing.close_day")
def close_day(ledger):
    """Appends its fire key: the test counts each fire's effects."""
    fire = current_fire()
    with open(ledger, "a") as out:
        out.write(f"close_day {fire.fire_key if fire else 'no-fire'}\\n")


@shared_task(name="billing.send_reminders")
def send_reminders(ledger):
    fire = current_fire()
    with open(ledger, "a") as out:
        out.write(f"send_reminders {fire.fire_key if fire else 'no-fire'}\\n")
'''

SETTINGS_TAIL = """
# --- the host's own Celery and celery beat, as before Cronfleet ---
import os
from datetime import timedelta

DATABASES = {{"default": {{"ENGINE": "django.db.backends.postgresql", "NAME": "{database}",
                          "HOST": "{pg_host}", "PORT": "{pg_port}", "USER": "{pg_user}"}}}}
CELERY_BROKER_URL = "{broker}"
CELERY_BROKER_TRANSPORT_OPTIONS = {{"global_keyprefix": "{prefix}"}}
CELERY_BEAT_SCHEDULE = {{
    "close-day": {{"task": "billing.close_day", "schedule": timedelta(seconds=2), "args": ["{ledger}"]}},
}}
# A permissive API default, as some projects have: Cronfleet's API must not follow it.
REST_FRAMEWORK = {{"DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.AllowAny"],
                  "DEFAULT_AUTHENTICATION_CLASSES": ["rest_framework.authentication.SessionAuthentication",
                                                     "rest_framework.authentication.BasicAuthentication"]}}

# --- Cronfleet ---
INSTALLED_APPS += ["django_celery_beat", "rest_framework", "drf_spectacular", "billing", "scheduler_app"]
CRONFLEET_ALLOWED_TASKS = ["billing.*"]
"""

URLS_TAIL = """
from django.urls import include

urlpatterns += [path("cron/", include("scheduler_app.urls"))]
"""

# What a person would try against the host's web app, through Django's test client.
PROBE = """\
import json

from django.contrib import admin
from django.contrib.auth.models import User
from django.test import Client
from django.urls import get_resolver
from django_celery_beat.models import PeriodicTask
from scheduler_app.models import Job, JobRun

found = {"title": str(admin.site.site_header), "periodic_task_admin": admin.site.is_registered(PeriodicTask)}
found["login_page"] = Client(HTTP_HOST="localhost").get("/admin/login/").status_code
found["api_docs"] = [Client(HTTP_HOST="localhost").get(page).status_code
                     for page in ("/cron/api/schema/", "/cron/api/docs/")]
runs_before = JobRun.objects.count()
job = Job.objects.order_by("id").first()
routes = ["/cron/api/v1/jobs/", f"/cron/api/v1/jobs/{job.id}/", f"/cron/api/v1/jobs/{job.id}/trigger/",
          "/cron/api/v1/runs/", "/cron/api/v1/tenants/", "/cron/api/v1/keys/", "/cron/api/v1/stats/",
          "/cron/api/v1/me"]
User.objects.create_user("plain", password="pw-plain-123")
plain = Client(HTTP_HOST="localhost")
plain.login(username="plain", password="pw-plain-123")
refusals = {}
for who, client in (("anonymous", Client(HTTP_HOST="localhost")), ("plain", plain)):
    for route in routes:
        for method in ("get", "post"):
            status = getattr(client, method)(route, HTTP_X_CRONFLEET_TENANT="host").status_code
            refusals[f"{who} {method} {route}"] = status
found["refusals"] = refusals
found["runs_written"] = JobRun.objects.count() - runs_before
print("PROBE " + json.dumps(found))
"""


def find_python(minor: str) -> str | None:
    """An interpreter of Python `minor` (3.12): on PATH, or one of pyenv's versions."""
    if found := shutil.which(f"python{minor}"):
        probe = subprocess.run([found, "--version"], capture_output=True, text=True)
        if probe.returncode == 0:
            return found
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    for version in sorted(root.glob(f"{minor}.*"), reverse=True):
        if (version / "bin" / "python").exists():
            return str(version / "bin" / "python")
    return None


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel, built from a copy of the checkout (tests/system/deploy/test_package.py says why)."""
    out = tmp_path_factory.mktemp("wheel")
    shutil.copytree(ROOT, out / "source", ignore=NOT_SOURCES)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out), str(out / "source")],
        check=True,
        timeout=300,
    )
    (built,) = out.glob("cronfleet-*.whl")
    return built


class Host:
    """The host project in a directory of its own, with its virtual environment."""

    def __init__(self, home: Path, python: str, django: str, wheel: Path) -> None:
        self.home, self.venv, self.site = home, home / "venv", home / "site"
        self.ledger = home / "ledger.txt"
        self.procs: list[tuple[subprocess.Popen, Path]] = []
        # Without a pip of its own: this process's pip installs into it (`pip --python`).
        run([python, "-m", "venv", "--without-pip", str(self.venv)], timeout=120)
        # The wheel and the host's Django release, as `pip install cronfleet Django==...` would.
        self.pip("install", "--quiet", f"{wheel}[celery-beat]", f"Django{django}", timeout=600)

    def pip(self, *args: str, timeout: float) -> None:
        """pip run against the host's venv. --no-compile: the modules the host imports are
        compiled as it imports them, not all of every package (most never are)."""
        command, *rest = args
        target = str(self.venv / "bin" / "python")
        run([sys.executable, "-m", "pip", "--python", target, command, "--no-compile", *rest], timeout=timeout)

    def env(self) -> dict[str, str]:
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("DJANGO_", "CRONFLEET_", "CELERY_", "DATABASE_", "PYTHONPATH"))
        }
        env.update(
            DJANGO_SETTINGS_MODULE="hostsite.settings",
            PYTHONUNBUFFERED="1",
            PATH=f"{self.venv / 'bin'}:{env.get('PATH', '')}",
        )
        return env

    def manage(self, *args: str, timeout: float = 120) -> str:
        done = subprocess.run(
            [str(self.venv / "bin" / "python"), "manage.py", *args],
            cwd=self.site,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert done.returncode == 0, f"manage.py {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
        return done.stdout

    def start(self, name: str, *argv: str) -> subprocess.Popen:
        log = self.home / f"{name}.log"
        proc = subprocess.Popen(
            [str(self.venv / "bin" / argv[0]), *argv[1:]],
            cwd=self.site,
            env=self.env(),
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.procs.append((proc, log))
        return proc

    def start_fleet(self) -> tuple[list[subprocess.Popen], subprocess.Popen]:
        """Two runbeats and the host's own Celery worker (`celery -A hostsite worker`), ready."""
        beats = [self.start(f"beat{i}", "python", "manage.py", "runbeat", "--max-sleep", "0.5") for i in (1, 2)]
        worker = self.start(
            "worker",
            "celery",
            "-A",
            "hostsite",
            "worker",
            "-l",
            "info",
            "-c",
            "2",
            "--without-mingle",
            "--without-gossip",
        )
        wait_for(lambda: "ready." in self.log(worker) or worker.poll() is not None, timeout=90, what="worker ready")
        assert worker.poll() is None, self.log(worker)
        return beats, worker

    def log(self, proc: subprocess.Popen) -> str:
        return next(log for p, log in self.procs if p is proc).read_text(errors="replace")

    def stop_all(self) -> None:
        for proc, _ in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc, _ in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)


def run(argv: list[str], timeout: float, **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kwargs)
    assert done.returncode == 0, f"{' '.join(argv)}:\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture
def database():
    name = f"cronfleet_adopt_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(f"{POSTGRES}/postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield name
    with psycopg.connect(f"{POSTGRES}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def make_host(home: Path, python: str, django: str, wheel: Path, database: str) -> Host:
    host = Host(home, python, django, wheel)
    host.site.mkdir()
    run([str(host.venv / "bin" / "django-admin"), "startproject", "hostsite", str(host.site)], timeout=60)
    package = host.site / "hostsite"
    (package / "celery.py").write_text(CELERY_APP)
    (package / "__init__.py").write_text(PACKAGE_INIT)
    (host.site / "billing").mkdir()
    (host.site / "billing" / "__init__.py").write_text("")
    (host.site / "billing" / "tasks.py").write_text(TASKS)
    pg = psycopg.conninfo.conninfo_to_dict(f"{POSTGRES}/postgres")
    with (package / "settings.py").open("a") as settings:
        settings.write(
            SETTINGS_TAIL.format(
                database=database,
                pg_host=pg.get("host", "127.0.0.1"),
                pg_port=pg.get("port", "5432"),
                pg_user=pg.get("user", "postgres"),
                broker=REDIS,
                prefix=f"{database}:",
                ledger=host.ledger,
            )
        )
    with (package / "urls.py").open("a") as urls:
        urls.write(URLS_TAIL)
    return host


def fires_recorded(host: Host) -> dict[str, list[str]]:
    lines = host.ledger.read_text().split("\n") if host.ledger.exists() else []
    found: dict[str, list[str]] = {}
    for line in filter(None, lines):
        task, key = line.split(" ", 1)
        found.setdefault(task, []).append(key)
    return found


@pytest.mark.parametrize(
    ("python_minor", "django"), [("3.11", ">=5.2,<6.0"), ("3.12", ">=6.0,<6.1")], ids=["django-5.2", "django-6.0"]
)
def test_a_host_project_adopts_cronfleet_and_runs_its_tasks_once_per_fire(
    python_minor, django, wheel, database, tmp_path
):
    python = find_python(python_minor)
    if python is None:
        pytest.skip(f"Python {python_minor} is not installed (pyenv install {python_minor})")
    host = make_host(tmp_path, python, django, wheel, database)
    try:
        # Nothing required beyond the allow-list; `check` runs Cronfleet's system checks too.
        host.manage("check")
        assert host.manage("cronfleet", "--version").startswith("cronfleet ")
        host.manage("migrate", "--no-input", timeout=300)
        # The host's celery beat had a PeriodicTask row besides CELERY_BEAT_SCHEDULE.
        host.manage(
            "shell",
            "-c",
            textwrap.dedent(f'''
            from django_celery_beat.models import IntervalSchedule, PeriodicTask
            every = IntervalSchedule.objects.create(every=3, period=IntervalSchedule.SECONDS)
            PeriodicTask.objects.create(name="reminders", task="billing.send_reminders", interval=every,
                                        args='["{host.ledger}"]')
        '''),
        )
        host.manage("tenants", "add", "host", "--name", "Host")
        imported = host.manage("import_beat", "--tenant", "host", "--from-db", "--from-settings", "--disable-source")
        assert "close-day" in imported and "reminders" in imported, imported

        beats, worker = host.start_fleet()
        wait_for(
            lambda: all(len(fires_recorded(host).get(task, [])) >= FIRES for task in ("close_day", "send_reminders")),
            timeout=120,
            interval=0.5,
            what=f"{FIRES} fires of each task",
        )
        for beat in beats:
            os.killpg(beat.pid, signal.SIGTERM)
        for beat in beats:
            beat.wait(timeout=30)
            assert beat.returncode == 0, host.log(beat)

        # Every run the beats recorded ends, and each ran once: its fire key in the ledger once.
        def settled() -> dict | None:
            out = host.manage(
                "shell",
                "-c",
                textwrap.dedent("""
                import json
                from scheduler_app.models import JobRun
                rows = list(JobRun.objects.values_list("job__name", "state", "attempt", "job_id", "scheduled_at"))
                print(json.dumps([[name, state, attempt, f"{job_id}:{at.isoformat()}"]
                                  for name, state, attempt, job_id, at in rows]))
            """),
            )
            rows = json.loads(out.strip().splitlines()[-1])
            return rows if rows and all(state in ("succeeded", "skipped") for _, state, _, _ in rows) else None

        rows = wait_for(settled, timeout=60, interval=0.5, what="every run finished")
        recorded = fires_recorded(host)
        for task, job in (("close_day", "close-day"), ("send_reminders", "reminders")):
            keys = recorded[task]
            assert len(keys) == len(set(keys)), f"{task} ran twice for a fire: {sorted(keys)}"
            succeeded = [row for row in rows if row[0] == job and row[1] == "succeeded"]
            assert len(succeeded) == len(keys) >= FIRES
            assert all(attempt == 1 for _, _, attempt, _ in succeeded)
        assert "no-fire" not in " ".join(key for keys in recorded.values() for key in keys)

        # The worker registered as a node, and the worker log names the task each run called.
        status = host.manage("status")
        assert "Workers: 0 live" not in status, status

        probe = json.loads(host.manage("shell", "-c", PROBE).split("PROBE ", 1)[1])
        assert probe["title"] == "Django administration"
        assert probe["periodic_task_admin"] is True
        assert probe["login_page"] == 200
        assert probe["api_docs"] == [200, 200]
        allowed = {route: code for route, code in probe["refusals"].items() if code not in (401, 403)}
        assert allowed == {}, allowed
        assert probe["runs_written"] == 0
    finally:
        host.stop_all()
        redis.Redis.from_url(REDIS).delete(*(redis.Redis.from_url(REDIS).keys(f"{database}:*") or [b"none"]))
