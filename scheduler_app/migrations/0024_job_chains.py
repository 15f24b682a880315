"""Chains: a job that runs when another job's run ends (Job.after_job, after_states,
has_children; JobRun.parent_run and the trigger value "chain").

The new columns have database defaults (NULL, '[]', false), so rows written by raw SQL need
none. The two foreign keys get no database constraint (adding one to the live job and run
tables checks every row while writes wait; the ORM and the services hold them) and their
partial indexes are built CONCURRENTLY on PostgreSQL (scheduler_app/migrationops.py).
"""

import django.db.models.deletion
from django.db import migrations, models

from scheduler_app.migrationops import AddIndexConcurrentlyOnPostgres


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY

    dependencies = [
        ("scheduler_app", "0023_maintenance_windows"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="after_job",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                db_index=False,
                help_text="Run when a run of this job ends (a chained job has no schedule)",
                null=True,
                on_delete=django.db.models.deletion.RESTRICT,
                related_name="children",
                to="scheduler_app.job",
            ),
        ),
        migrations.AddField(
            model_name="job",
            name="after_states",
            field=models.JSONField(
                blank=True,
                db_default=models.Value([], models.JSONField()),
                default=list,
                help_text="The parent's end states that start this job: succeeded, failed, dead",
            ),
        ),
        migrations.AddField(
            model_name="job",
            name="has_children",
            field=models.BooleanField(db_default=False, default=False, editable=False),
        ),
        migrations.AddField(
            model_name="jobrun",
            name="parent_run",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="child_runs",
                to="scheduler_app.jobrun",
            ),
        ),
        migrations.AlterField(
            model_name="jobrun",
            name="trigger",
            field=models.CharField(
                choices=[("schedule", "Schedule"), ("manual", "Manual"), ("backfill", "Backfill"), ("chain", "Chain")],
                db_default="schedule",
                default="schedule",
                max_length=16,
            ),
        ),
        AddIndexConcurrentlyOnPostgres(
            model_name="job",
            index=models.Index(
                condition=models.Q(("after_job__isnull", False)), fields=["after_job"], name="job_after_idx"
            ),
        ),
        AddIndexConcurrentlyOnPostgres(
            model_name="jobrun",
            index=models.Index(
                condition=models.Q(("parent_run__isnull", False)), fields=["parent_run"], name="jobrun_parent_idx"
            ),
        ),
    ]
