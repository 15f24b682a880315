"""Pauses that explain and expire (docs/pauses.md): who paused a job, when, until when and
what then (resume or alert), the alert kind a pause that ran out raises, and bulk pauses
waiting for a second person's approval (PauseRequest).

The job table's new columns are NULL or have a database default, so the table is not
rewritten; the index of pauses by expiry is built CONCURRENTLY on PostgreSQL."""

import django.db.models.deletion
from django.db import migrations, models

from scheduler_app.migrationops import AddIndexConcurrentlyOnPostgres


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY

    dependencies = [
        ("scheduler_app", "0031_objectives"),
    ]

    operations = [
        migrations.CreateModel(
            name="PauseRequest",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("scope", models.CharField(max_length=100)),
                ("job_ids", models.JSONField(default=list)),
                ("fingerprint", models.CharField(max_length=16)),
                ("note", models.CharField(blank=True, max_length=500)),
                ("paused_until", models.DateTimeField(blank=True, null=True)),
                ("pause_expiry", models.CharField(blank=True, default="", max_length=8)),
                ("requested_by", models.CharField(max_length=200)),
                ("requested_at", models.DateTimeField()),
                (
                    "state",
                    models.CharField(
                        choices=[("pending", "Pending"), ("approved", "Approved"), ("refused", "Refused")],
                        default="pending",
                        max_length=8,
                    ),
                ),
                ("decided_by", models.CharField(blank=True, max_length=200)),
                ("decided_at", models.DateTimeField(blank=True, null=True)),
            ],
            options={
                "ordering": ["-requested_at", "-id"],
                "permissions": [("approve_pauserequest", "Can approve another person's bulk pause")],
            },
        ),
        migrations.AddField(
            model_name="job",
            name="pause_alerted_at",
            field=models.DateTimeField(blank=True, editable=False, null=True),
        ),
        migrations.AddField(
            model_name="job",
            name="pause_expiry",
            field=models.CharField(
                blank=True,
                db_default="",
                default="",
                editable=False,
                max_length=8,
            ),
        ),
        migrations.AddField(
            model_name="job",
            name="paused_at",
            field=models.DateTimeField(blank=True, editable=False, null=True),
        ),
        migrations.AddField(
            model_name="job",
            name="paused_by",
            field=models.CharField(blank=True, db_default="", default="", editable=False, max_length=200),
        ),
        migrations.AddField(
            model_name="job",
            name="paused_until",
            field=models.DateTimeField(blank=True, editable=False, null=True),
        ),
        migrations.AlterField(
            model_name="alert",
            name="kind",
            field=models.CharField(
                choices=[
                    ("no_success", "No Success"),
                    ("failed", "Failed"),
                    ("start_lag", "Start Lag"),
                    ("too_long", "Too Long"),
                    ("too_short", "Too Short"),
                    ("auto_paused", "Auto Paused"),
                    ("checkin_up", "Checkin Up"),
                    ("time_data", "Time Data"),
                    ("pause_expired", "Pause Expired"),
                ],
                max_length=16,
            ),
        ),
        AddIndexConcurrentlyOnPostgres(
            model_name="job",
            index=models.Index(
                condition=models.Q(
                    ("enabled", False), ("pause_alerted_at__isnull", True), ("paused_until__isnull", False)
                ),
                fields=["paused_until"],
                name="job_pause_expiry_idx",
            ),
        ),
        migrations.AddField(
            model_name="pauserequest",
            name="tenant",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="pause_requests",
                to="scheduler_app.tenant",
            ),
        ),
        migrations.AddIndex(
            model_name="pauserequest",
            index=models.Index(
                condition=models.Q(("state", "pending")), fields=["-requested_at"], name="pauserequest_pending_idx"
            ),
        ),
    ]
