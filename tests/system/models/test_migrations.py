"""The migrations that build or drop indexes CONCURRENTLY (from 0010 on) run for real,
backwards and forwards, in `manage.py migrate` processes on a database of their own. Their
SQL is read in tests/integration/models/test_migrations.py."""

from __future__ import annotations

import subprocess
import sys
import uuid

import psycopg
import pytest
from django.db import connection

from tests.conftest import ROOT, process_env
from tests.integration.models.test_migrations import APP, FIRST_CAREFUL


@pytest.mark.slow
@pytest.mark.django_db
def test_the_concurrent_migrations_run_backwards_and_forwards_on_postgres():
    name = f"cronfleet_migrations_{uuid.uuid4().hex[:8]}"
    settings = connection.settings_dict
    server = (
        f"host={settings['HOST'] or '127.0.0.1'} port={settings['PORT'] or 5432} user={settings['USER'] or 'postgres'}"
    )
    with psycopg.connect(f"{server} dbname=postgres", autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        env = process_env(
            DATABASE_URL=f"postgres://{settings['USER'] or 'postgres'}@"
            f"{settings['HOST'] or '127.0.0.1'}:{settings['PORT'] or 5432}/{name}"
        )

        def migrate(*target: str) -> None:
            done = subprocess.run(
                [sys.executable, "manage.py", "migrate", "-v", "0", *target],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert done.returncode == 0, done.stderr

        def indexes() -> set[str]:
            with psycopg.connect(f"{server} dbname={name}") as conn:
                return {row[0] for row in conn.execute("SELECT indexname FROM pg_indexes WHERE schemaname = 'public'")}

        migrate()
        latest = indexes()
        made = {
            "job_retention_idx",
            "jobrun_triggered_idx",
            "jobrun_finished_brin",
            "jobrun_tenant_state_idx",
            "job_tenant_due_idx",
            "job_queue_tenant_idx",
        }
        dropped = {"scheduler_app_jobrun_job_id_4f251f58", "scheduler_app_jobrun_tenant_id_1bb4eedc"}
        assert made <= latest and not dropped & latest
        migrate(APP, FIRST_CAREFUL)  # 0010 itself stays
        assert "scheduler_app_jobrun_tenant_id_1bb4eedc" in indexes()
        migrate(APP, "0009_job_batch")
        before = indexes()
        assert dropped <= before and not made & before  # the foreign keys' own indexes, back
        migrate()
        assert indexes() == latest
    finally:
        with psycopg.connect(f"{server} dbname=postgres", autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
