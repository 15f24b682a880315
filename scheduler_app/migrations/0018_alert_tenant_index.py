"""A tenant's newest alerts first; built CONCURRENTLY on PostgreSQL (alerts are written while
it is built)."""

from django.db import migrations, models

from scheduler_app.migrationops import AddIndexConcurrentlyOnPostgres


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY

    dependencies = [
        ("scheduler_app", "0016_job_tenant_due_idx"),
    ]

    operations = [
        AddIndexConcurrentlyOnPostgres(
            model_name="alert",
            index=models.Index(fields=["tenant", "-raised_at", "-id"], name="alert_tenant_recent_idx"),
        ),
    ]
