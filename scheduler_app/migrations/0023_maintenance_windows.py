"""Maintenance windows (MaintenanceWindow): a tenant's, or the whole deployment's when the
tenant is empty. A new table only: no index or constraint on a live one."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("scheduler_app", "0022_alert_kind_auto_paused"),
    ]

    operations = [
        migrations.CreateModel(
            name="MaintenanceWindow",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("name", models.CharField(max_length=64)),
                ("description", models.CharField(blank=True, db_default="", default="", max_length=500)),
                (
                    "zone",
                    models.CharField(
                        db_default="UTC",
                        default="UTC",
                        help_text="IANA zone the recurring window's cron expression is read in",
                        max_length=64,
                    ),
                ),
                ("starts_at", models.DateTimeField(blank=True, null=True)),
                ("ends_at", models.DateTimeField(blank=True, null=True)),
                (
                    "cron",
                    models.CharField(
                        blank=True,
                        db_default="",
                        default="",
                        help_text="A recurring window opens at each fire of this expression",
                        max_length=200,
                    ),
                ),
                ("duration_minutes", models.PositiveIntegerField(blank=True, null=True)),
                (
                    "action",
                    models.CharField(
                        choices=[("skip", "Skip"), ("defer", "Defer")], db_default="skip", default="skip", max_length=8
                    ),
                ),
                (
                    "running_policy",
                    models.CharField(
                        choices=[("let_finish", "Let Finish"), ("cancel", "Cancel")],
                        db_default="let_finish",
                        default="let_finish",
                        max_length=12,
                    ),
                ),
                (
                    "tags",
                    models.JSONField(
                        blank=True,
                        db_default=models.Value([], models.JSONField()),
                        default=list,
                        help_text="Jobs with any of these tags (empty: any job)",
                    ),
                ),
                (
                    "target_kinds",
                    models.JSONField(
                        blank=True,
                        db_default=models.Value([], models.JSONField()),
                        default=list,
                        help_text="Jobs of these target kinds: task, http, command, sql (empty: any)",
                    ),
                ),
                ("enabled", models.BooleanField(db_default=True, default=True)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("updated_at", models.DateTimeField(auto_now=True)),
                (
                    "tenant",
                    models.ForeignKey(
                        blank=True,
                        help_text="Empty: the whole deployment's window (staff only)",
                        null=True,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="maintenance_windows",
                        to="scheduler_app.tenant",
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(fields=("tenant", "name"), name="window_name_unique_per_tenant"),
                    models.UniqueConstraint(
                        condition=models.Q(("tenant__isnull", True)),
                        fields=("name",),
                        name="window_name_unique_deployment_wide",
                    ),
                ],
            },
        ),
    ]
