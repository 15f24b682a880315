"""Check-ins: monitored jobs that run elsewhere.

The target kind `monitor` (a choice: no SQL), the Monitor table (each monitored job's ping
key; a new table, so its indexes and foreign keys are plain), and the partial index of the
monitored runs still open, which the beat's sweep for missed check-ins reads
(dispatch/checkins.py). That one is on the live run table: built CONCURRENTLY on PostgreSQL
(scheduler_app/migrationops.py), and it stays empty while no job is monitored.
"""

import uuid

import django.db.models.deletion
from django.db import migrations, models

from scheduler_app.migrationops import IndexSQL


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY

    dependencies = [
        ("scheduler_app", "0024_job_chains"),
    ]

    operations = [
        migrations.AlterField(
            model_name="job",
            name="target_kind",
            field=models.CharField(
                choices=[
                    ("task", "Task"),
                    ("http", "Http"),
                    ("command", "Command"),
                    ("sql", "Sql"),
                    ("monitor", "Monitor"),
                ],
                default="task",
                max_length=16,
            ),
        ),
        migrations.CreateModel(
            name="Monitor",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("ping_key", models.UUIDField(default=uuid.uuid4, editable=False, unique=True)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                (
                    "job",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE, related_name="monitor", to="scheduler_app.job"
                    ),
                ),
                (
                    "tenant",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="+", to="scheduler_app.tenant"
                    ),
                ),
            ],
        ),
        IndexSQL(
            "CREATE INDEX {concurrently}IF NOT EXISTS jobrun_checkin_open_idx ON scheduler_app_jobrun (scheduled_at) "
            "WHERE state IN ('pending', 'running') AND substr(reason, 1, 8) = 'checkin:'",
            "DROP INDEX {concurrently}IF EXISTS jobrun_checkin_open_idx",
        ),
    ]
