"""A tenant's due jobs in claim order (priority, fire time, id), for the fair ranking of the
claim; built CONCURRENTLY on PostgreSQL, so beats go on claiming meanwhile."""

from django.db import migrations, models

from scheduler_app.migrationops import AddIndexConcurrentlyOnPostgres


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY

    dependencies = [
        ("scheduler_app", "0015_ledger_rollup"),
    ]

    operations = [
        AddIndexConcurrentlyOnPostgres(
            model_name="job",
            index=models.Index(
                condition=models.Q(("enabled", True), ("next_run_at__isnull", False)),
                fields=["tenant", "priority", "next_run_at", "id"],
                name="job_tenant_due_idx",
            ),
        ),
    ]
