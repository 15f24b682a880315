"""A job pauses itself after repeated failure, with real processes: a real worker and beat
pause a failing job after three runs (resume starts afresh), and the embedded SQLite demo's
path, in a subprocess, counts and pauses too."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from datetime import datetime, timedelta

import pytest

from scheduler_app import alerts, services
from scheduler_app.models import ACTIVE_STATES, Alert, AuditEvent, Job, JobRun, Node, NodeKind, RunState
from tests.conftest import ROOT, wait_for
from tests.integration.ledger.test_autopause import FAIL
from tests.support.embedded import embedded_env


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_real_worker_and_beat_pause_a_failing_job_after_three_runs_and_resume_starts_afresh(processes, queue_name):
    tenant = services.tenant_create(slug="autopause", name="Auto-pause")
    env = {"CRONFLEET_ALERT_CHECK_SECONDS": "1"}
    # Every 4 s: a failing run ends long before the next fire, so the third one's end pauses
    # the job before a fourth fire is due.
    job = services.job_create(
        tenant,
        services.JobSpec(
            name="flaky", task_name=FAIL, every=4, queue=queue_name, max_attempts=1, pause_after_failures=3
        ),
    )
    alerts.rule_set(job, {"emails": ["ops@example.com"]})
    processes.worker(queue_name, **env)
    processes.beat("beat", "--max-sleep", "1", **env)

    wait_for(lambda: not Job.objects.get(id=job.id).enabled, timeout=60, what="the job to pause itself")
    job.refresh_from_db()
    beat_turned_past(job.auto_paused_at + timedelta(seconds=8))  # two more intervals: nothing fires
    wait_for(
        lambda: not JobRun.objects.filter(job=job).exclude(state=RunState.DEAD).exists(),
        timeout=30,
        what="every run fired before the pause to end",
    )
    job.refresh_from_db()
    runs = list(JobRun.objects.filter(job=job).order_by("id").values_list("id", "state"))
    # The third end pauses the job; on a loaded machine later fires can come due before that end
    # is recorded (their ends then count too), but none comes after the pause.
    assert len(runs) >= 3 and {state for _, state in runs} == {"dead"}, runs
    assert not JobRun.objects.filter(job=job, scheduled_at__gt=job.auto_paused_at).exists()
    assert job.auto_paused_at is not None and job.consecutive_failures == len(runs)
    # The note names the runs that paused it: the first to end (three, or more when one
    # statement ended several), which on a loaded machine need not be the first fired.
    named = re.fullmatch(
        r"paused after (\d+) failed or dead runs in a row: runs ([\d, ]+) \(last: dead: RuntimeError.*", job.paused_note
    )
    assert named, job.paused_note
    count, named_ids = int(named[1]), [int(run_id) for run_id in named[2].split(", ")]
    ended_first = JobRun.objects.filter(job=job).order_by("finished_at", "id").values_list("id", flat=True)[:count]
    assert count >= 3 and named_ids == sorted(ended_first), (job.paused_note, runs)
    assert AuditEvent.objects.get(job=job, action="job.auto_paused").detail["runs"] == named_ids
    wait_for(
        lambda: Alert.objects.filter(job=job, kind=alerts.AUTO_PAUSED).exists(), timeout=30, what="the auto-pause alert"
    )

    services.job_resume(job, actor="test")
    job.refresh_from_db()
    assert (job.consecutive_failures, job.auto_paused_at) == (0, None)
    wait_for(
        lambda: JobRun.objects.filter(job=job, state=RunState.DEAD).count() > 3,
        timeout=30,
        what="a run after the resume",
    )
    wait_for(lambda: not Job.objects.get(id=job.id).enabled, timeout=60, what="the job to pause itself again")
    job.refresh_from_db()
    wait_for(
        lambda: not JobRun.objects.filter(job=job, state__in=ACTIVE_STATES).exists(),
        timeout=30,
        what="every run fired before the second pause to end",  # the fires missed while paused: skipped
    )
    assert JobRun.objects.filter(job=job, state=RunState.DEAD).count() >= len(runs) + 3  # afresh: three more
    assert not JobRun.objects.filter(job=job, scheduled_at__gt=job.auto_paused_at).exists()
    wait_for(
        lambda: Alert.objects.filter(job=job, kind=alerts.AUTO_PAUSED).count() == 2,
        timeout=30,
        what="a second auto-pause alert",
    )


def beat_turned_past(instant: datetime) -> None:
    """Wait until a beat has begun a turn after `instant` (database clock): its node's
    heartbeat (after a turn, every nodes.BEAT_HEARTBEAT_SECONDS at most) passed `instant`, and
    then moved again, so a whole turn began after it."""
    beats = Node.objects.filter(kind=NodeKind.BEAT, stopped_at__isnull=True)
    seen = wait_for(
        lambda: (
            beats.filter(last_seen_at__gt=instant)
            .order_by("-last_seen_at")
            .values_list("last_seen_at", flat=True)
            .first()
        ),
        timeout=60,
        what=f"a beat's heartbeat after {instant.isoformat()}",
    )
    wait_for(lambda: beats.filter(last_seen_at__gt=seen).exists(), timeout=30, what="the beat's next turn")


# The embedded SQLite demo's path (transitions' ORM end, autopause's one job at a time), in a
# subprocess on a throwaway CRONFLEET_VAR_DIR, as tests/system/observability/test_dashboard_sqlite.py does.
SQLITE_SCRIPT = r"""
import json, sys
from datetime import timedelta
import django
django.setup()
from scheduler_app import services
from scheduler_app.dispatch import recovery
from scheduler_app.models import Job, JobRun, RunState, db_now
from scheduler_app.worker import execution

now = db_now()
tenant = services.tenant_create(slug="demo", name="Demo", timezone="UTC")
job = services.job_create(tenant, services.JobSpec(name="flaky", task_name="scheduler_app.fail", every=300,
                                                   max_attempts=1, pause_after_failures=3))
plain = services.job_create(tenant, services.JobSpec(name="plain", task_name="scheduler_app.fail", every=300,
                                                     max_attempts=1))

def run(job, seconds, task):
    Job.objects.filter(id=job.id).update(task_name=task)
    row = JobRun.objects.create(job=job, tenant=tenant, scheduled_at=now - timedelta(hours=1, seconds=seconds),
                                created_at=now, state=RunState.QUEUED)
    return execution.execute_run(row.id, 1, worker="w").state

states = [run(job, 0, "scheduler_app.fail"), run(job, 1, "scheduler_app.echo"), run(job, 2, "scheduler_app.fail"),
          run(job, 3, "scheduler_app.fail"), run(plain, 0, "scheduler_app.fail")]
counts = [Job.objects.get(id=job.id).consecutive_failures]
JobRun.objects.create(job=job, tenant=tenant, scheduled_at=now - timedelta(hours=2), created_at=now,
                      state=RunState.RUNNING, worker="gone", started_at=now - timedelta(minutes=5),
                      lease_expires_at=now - timedelta(minutes=1))
recovery.mark_lost_runs(db_now(), limit=10)
job = Job.objects.get(id=job.id)
plain = Job.objects.get(id=plain.id)
json.dump({"states": states, "counts": counts + [job.consecutive_failures], "enabled": job.enabled,
           "note": job.paused_note, "auto": job.auto_paused_at is not None,
           "plain": [plain.enabled, plain.consecutive_failures, plain.version]}, sys.stdout)
"""


def test_the_embedded_sqlite_path_counts_and_pauses_too(tmp_path):
    env, repo = embedded_env(tmp_path), str(ROOT)
    migrate = subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert migrate.returncode == 0, migrate.stderr
    done = subprocess.run(
        [sys.executable, "-c", SQLITE_SCRIPT], cwd=repo, env=env, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)

    assert found["states"] == ["dead", "succeeded", "dead", "dead", "dead"]
    assert found["counts"] == [2, 3] and found["enabled"] is False and found["auto"]
    assert found["note"].startswith("paused after 3 failed or dead runs in a row: runs ")
    assert "(last: dead: lost: lease expired" in found["note"]
    assert found["plain"] == [True, 0, 1]
