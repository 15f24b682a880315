# The operator's console (issue 13): the ledger's index for manual and backfilled runs, and
# alert rules per job with the alerts they raised, and the dashboard's per-minute rollup
# (scheduler_app/models/console.py); on PostgreSQL a BRIN index on finished_at for the
# dashboard's live hour (a few pages of index for ten million runs; nothing to the beats).
# Numbered 0011 beside the other branches' 0010s; merge migrations join them.
# The ledger's two indexes are built CONCURRENTLY on PostgreSQL (scheduler_app/migrationops.py).

import django.db.models.deletion
from django.db import migrations, models

from scheduler_app.migrationops import AddIndexConcurrentlyOnPostgres, IndexSQL


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY

    dependencies = [
        ("scheduler_app", "0010_retention"),
    ]

    operations = [
        AddIndexConcurrentlyOnPostgres(
            model_name="jobrun",
            index=models.Index(
                condition=models.Q(("trigger", "schedule"), _negated=True),
                fields=["-scheduled_at"],
                name="jobrun_triggered_idx",
            ),
        ),
        migrations.CreateModel(
            name="AlertRule",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("enabled", models.BooleanField(default=True)),
                (
                    "no_success_seconds",
                    models.PositiveIntegerField(
                        blank=True,
                        help_text="Expect a successful run at least this often (the dead-man's switch)",
                        null=True,
                    ),
                ),
                ("grace_seconds", models.PositiveIntegerField(default=0, help_text="... plus this much slack")),
                ("on_failure", models.BooleanField(default=False, help_text="Alert when a run ends failed or dead")),
                (
                    "max_start_lag_seconds",
                    models.FloatField(
                        blank=True, help_text="Alert when a run starts later than this after its fire time", null=True
                    ),
                ),
                (
                    "max_duration_seconds",
                    models.FloatField(blank=True, help_text="Alert when a run takes longer", null=True),
                ),
                (
                    "min_duration_seconds",
                    models.FloatField(
                        blank=True, help_text="Alert when a run finishes faster (it probably did nothing)", null=True
                    ),
                ),
                (
                    "webhook_url",
                    models.CharField(
                        blank=True,
                        help_text="POSTed a signed JSON alert (the tenant's webhook secret, as HTTP jobs)",
                        max_length=2000,
                    ),
                ),
                ("emails", models.JSONField(blank=True, default=list, help_text="Addresses mailed each alert")),
                (
                    "cooldown_seconds",
                    models.PositiveIntegerField(
                        default=3600, help_text="After an alert of one kind, further ones of that kind wait this long"
                    ),
                ),
                (
                    "checked_until",
                    models.DateTimeField(help_text="Runs that started or ended before this are evaluated"),
                ),
                ("last_success_at", models.DateTimeField(blank=True, null=True)),
                ("next_check_at", models.DateTimeField()),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("updated_at", models.DateTimeField(auto_now=True)),
                (
                    "job",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE, related_name="alert_rule", to="scheduler_app.job"
                    ),
                ),
            ],
        ),
        migrations.CreateModel(
            name="Alert",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                (
                    "kind",
                    models.CharField(
                        choices=[
                            ("no_success", "No Success"),
                            ("failed", "Failed"),
                            ("start_lag", "Start Lag"),
                            ("too_long", "Too Long"),
                            ("too_short", "Too Short"),
                        ],
                        max_length=16,
                    ),
                ),
                ("dedup_key", models.CharField(max_length=200, unique=True)),
                ("run_id", models.BigIntegerField(blank=True, null=True)),
                ("message", models.CharField(max_length=1000)),
                ("detail", models.JSONField(blank=True, default=dict)),
                ("raised_at", models.DateTimeField()),
                (
                    "suppressed",
                    models.PositiveIntegerField(
                        default=0, help_text="Alerts of this kind held back by the cool-down since"
                    ),
                ),
                ("delivered_at", models.DateTimeField(blank=True, null=True)),
                ("delivery_attempts", models.PositiveSmallIntegerField(default=0)),
                ("next_delivery_at", models.DateTimeField(blank=True, null=True)),
                ("delivering_until", models.DateTimeField(blank=True, null=True)),
                (
                    "delivery_log",
                    models.JSONField(blank=True, default=list, help_text="One entry per channel per attempt"),
                ),
                (
                    "job",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="alerts", to="scheduler_app.job"
                    ),
                ),
                (
                    "tenant",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="alerts", to="scheduler_app.tenant"
                    ),
                ),
                (
                    "rule",
                    models.ForeignKey(
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="alerts",
                        to="scheduler_app.alertrule",
                    ),
                ),
            ],
            options={
                "ordering": ["-raised_at", "-id"],
            },
        ),
        migrations.AddIndex(
            model_name="alertrule",
            index=models.Index(
                condition=models.Q(("enabled", True)), fields=["next_check_at"], name="alertrule_due_idx"
            ),
        ),
        migrations.AddIndex(
            model_name="alert",
            index=models.Index(fields=["job", "kind", "-raised_at"], name="alert_job_recent_idx"),
        ),
        migrations.AddIndex(
            model_name="alert",
            index=models.Index(
                condition=models.Q(("delivered_at__isnull", True)),
                fields=["next_delivery_at"],
                name="alert_undelivered_idx",
            ),
        ),
        migrations.CreateModel(
            name="RunMinute",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("minute", models.DateTimeField()),
                ("tenant_id", models.BigIntegerField()),
                ("succeeded", models.IntegerField(default=0)),
                ("failed", models.IntegerField(default=0)),
                ("dead", models.IntegerField(default=0)),
                ("retrying", models.IntegerField(default=0)),
                ("lost", models.IntegerField(default=0)),
                ("cancelled", models.IntegerField(default=0)),
                ("skipped", models.IntegerField(default=0)),
            ],
            options={
                "constraints": [models.UniqueConstraint(fields=("minute", "tenant_id"), name="runminute_unique")],
            },
        ),
        IndexSQL(
            "CREATE INDEX {concurrently}IF NOT EXISTS jobrun_finished_brin ON scheduler_app_jobrun USING brin (finished_at)",
            "DROP INDEX {concurrently}IF EXISTS jobrun_finished_brin",
            postgres_only=True,
        ),
    ]
