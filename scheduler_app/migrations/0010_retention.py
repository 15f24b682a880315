"""Retention: per-tenant and per-job policy fields, the two small indexes pruning needs, and
one index fewer on the ledger (job_id alone, which jobrun_one_per_fire already covers).

On PostgreSQL the indexes are built and dropped CONCURRENTLY (scheduler_app/migrationops.py;
so the migration is not atomic): a plain CREATE INDEX would hold off every beat's claim of
the job table while it reads the table, and a plain DROP INDEX would wait for, then block,
every use of the ledger.
Pruning runs needs no new index of the ledger itself (see scheduler_app/ledger/retention.py).
"""

from django.db import migrations, models

from scheduler_app.migrationops import AddIndexConcurrentlyOnPostgres, drop_column_index


def days_field(help_text):
    return models.PositiveIntegerField(blank=True, null=True, help_text=help_text)


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY

    dependencies = [
        ("scheduler_app", "0009_job_batch"),
    ]

    operations = [
        migrations.AddField(
            model_name="tenant",
            name="retention_days",
            field=days_field("Days finished runs are kept (0: forever); blank: CRONFLEET_RETENTION_DAYS"),
        ),
        migrations.AddField(
            model_name="tenant",
            name="retention_failed_days",
            field=days_field(
                "Days failed and dead runs are kept, at least as long as the others (0: forever); "
                "blank: CRONFLEET_RETENTION_FAILED_DAYS"
            ),
        ),
        migrations.AddField(
            model_name="tenant",
            name="retention_keep_last",
            field=days_field(
                "A job's newest runs kept whatever their age (0: none); blank: CRONFLEET_RETENTION_KEEP_LAST"
            ),
        ),
        migrations.AddField(
            model_name="job",
            name="retention_days",
            field=days_field("Days finished runs are kept (0: forever); blank: the tenant's"),
        ),
        migrations.AddField(
            model_name="job",
            name="retention_failed_days",
            field=days_field(
                "Days failed and dead runs are kept, at least as long as the others (0: forever); blank: the tenant's"
            ),
        ),
        migrations.AddField(
            model_name="job",
            name="retention_keep_last",
            field=days_field("The job's newest runs kept whatever their age (0: none); blank: the tenant's"),
        ),
        AddIndexConcurrentlyOnPostgres(
            model_name="job",
            index=models.Index(
                condition=models.Q(
                    ("retention_days__isnull", False),
                    ("retention_failed_days__isnull", False),
                    ("retention_keep_last__isnull", False),
                    _connector="OR",
                ),
                fields=["tenant", "id"],
                name="job_retention_idx",
            ),
        ),
        # The ledger's index of job_id alone duplicated the front of jobrun_one_per_fire.
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="jobrun",
                    name="job",
                    field=models.ForeignKey(
                        db_index=False, on_delete=models.deletion.CASCADE, related_name="runs", to="scheduler_app.job"
                    ),
                )
            ],
            database_operations=[
                drop_column_index("scheduler_app_jobrun", "job_id", "scheduler_app_jobrun_job_id_4f251f58")
            ],
        ),
        AddIndexConcurrentlyOnPostgres(
            model_name="auditevent",
            index=models.Index(
                condition=models.Q(("run_id__isnull", False)), fields=["created_at"], name="audit_run_created_idx"
            ),
        ),
    ]
