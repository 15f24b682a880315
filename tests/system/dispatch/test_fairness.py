"""Fair claiming across tenants in the embedded SQLite default: the same statements without
lock clauses, in a real SQLite file, in a `manage.py shell` subprocess."""

import json
import os
import subprocess
import sys

from scheduler_app import dispatch
from tests.conftest import ROOT


def test_sqlite_claims_fairly_and_holds_fires_over_a_quota(tmp_path):
    """The embedded default: the same statements without lock clauses, in a real SQLite file."""
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "CELERY_BROKER_URL"}}
    env.update(DJANGO_SETTINGS_MODULE="project.settings", CRONFLEET_VAR_DIR=str(tmp_path))
    migrate = subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert migrate.returncode == 0, migrate.stdout + migrate.stderr
    script = """
import json
from datetime import timedelta
from scheduler_app import dispatch
from scheduler_app.models import Job, JobRun, Tenant, db_now
now = db_now()
big = Tenant.objects.create(slug="big", name="big", max_fires_per_minute=3)
small = Tenant.objects.create(slug="small", name="small", weight=2)
for tenant, count in ((big, 8), (small, 4)):
    for i in range(count):
        Job.objects.create(tenant=tenant, name=f"j{i}", task_name="scheduler_app.echo", cron="",
                           run_at=now - timedelta(seconds=1), next_run_at=now - timedelta(seconds=1))
first = dispatch.run_turn(now, batch_size=6, grace=timedelta(seconds=60), sweep=False)
states = lambda t: sorted(JobRun.objects.filter(tenant=t).values_list("state", flat=True))
after_first = {"claimed": first.claimed, "big": states(big), "small": states(small)}
dispatch.run_turn(now, batch_size=6, grace=timedelta(seconds=60), sweep=False)
later = dispatch.run_turn(now + timedelta(seconds=61), batch_size=6, grace=timedelta(seconds=60), sweep=False)
print(json.dumps({"first": after_first, "released": later.released, "big": states(big),
                  "reasons": sorted(set(JobRun.objects.filter(state="pending").values_list("reason", flat=True)))}))
"""
    done = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", script],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr

    result = json.loads(done.stdout.strip().splitlines()[-1])
    # batch 6, weights 1 and 2: small's four (shares 1/2 .. 2) come before big's third (3)
    assert result["first"] == {"claimed": 6, "big": ["queued", "queued"], "small": ["queued"] * 4}
    assert result["released"] == 3
    assert result["big"] == ["pending"] * 2 + ["queued"] * 6
    assert result["reasons"] == [dispatch.common.FIRES_REASON.format(3)]
