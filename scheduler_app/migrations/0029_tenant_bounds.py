"""Defaults that bound a tenant (issue 40): a tenant's own bound on manual runs per hour
(Tenant.manual_runs_per_hour, NULL: CRONFLEET_MANUAL_RUNS_PER_HOUR), and the index that tells
whether another tenant's jobs use a named queue (job_queue_tenant_idx), built CONCURRENTLY on
PostgreSQL.

The new column is NULL for every row, so the tenant table is not rewritten."""

from django.db import migrations, models

from scheduler_app.migrationops import AddIndexConcurrentlyOnPostgres


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY

    dependencies = [
        ("scheduler_app", "0028_checkin_up_and_chat"),
    ]

    operations = [
        migrations.AddField(
            model_name="tenant",
            name="manual_runs_per_hour",
            field=models.PositiveIntegerField(
                blank=True,
                help_text="Manual runs (triggers, replays, backfilled fires) per hour (0: unbounded); "
                "blank: CRONFLEET_MANUAL_RUNS_PER_HOUR",
                null=True,
            ),
        ),
        AddIndexConcurrentlyOnPostgres(
            model_name="job",
            index=models.Index(
                condition=models.Q(("queue", ""), _negated=True),
                fields=["queue", "tenant"],
                name="job_queue_tenant_idx",
            ),
        ),
    ]
