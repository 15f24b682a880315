"""Business-day calendars (Calendar, per tenant) and a job's calendar and calendar policy.

The job's columns have database defaults (NULL, 'skip'), so rows written by raw SQL need
none. The calendar column gets no foreign-key constraint (adding one to the live job table
checks every row while writes wait; the ORM's PROTECT holds it) and its partial index is
built CONCURRENTLY on PostgreSQL (scheduler_app/migrationops.py).
"""

import django.db.models.deletion
from django.db import migrations, models

from scheduler_app.migrationops import AddIndexConcurrentlyOnPostgres


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY

    dependencies = [
        ("scheduler_app", "0020_job_auto_pause_and_managed"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="calendar_policy",
            field=models.CharField(
                blank=True,
                choices=[
                    ("skip", "skip"),
                    ("next_business_day", "next_business_day"),
                    ("previous_business_day", "previous_business_day"),
                ],
                db_default="skip",
                default="skip",
                help_text="A fire on a non-business day of the calendar: skip it, or run it on the next or previous business day",
                max_length=24,
            ),
        ),
        migrations.CreateModel(
            name="Calendar",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("name", models.CharField(max_length=64)),
                ("description", models.CharField(blank=True, db_default="", default="", max_length=500)),
                (
                    "country",
                    models.CharField(
                        blank=True,
                        db_default="",
                        default="",
                        help_text="ISO 3166 code of the country whose public holidays count (blank: none)",
                        max_length=8,
                    ),
                ),
                (
                    "subdivision",
                    models.CharField(
                        blank=True,
                        db_default="",
                        default="",
                        help_text="The country's subdivision code (state, province), blank for national holidays",
                        max_length=16,
                    ),
                ),
                (
                    "weekdays",
                    models.CharField(
                        db_default="01234",
                        default="01234",
                        help_text="Business weekdays as digits, 0 Monday .. 6 Sunday",
                        max_length=7,
                    ),
                ),
                (
                    "extra_holidays",
                    models.JSONField(
                        blank=True,
                        db_default=models.Value({}, models.JSONField()),
                        default=dict,
                        help_text='Non-business dates by hand: {"YYYY-MM-DD": "name"}',
                    ),
                ),
                (
                    "extra_business_days",
                    models.JSONField(
                        blank=True,
                        db_default=models.Value([], models.JSONField()),
                        default=list,
                        help_text='Business dates over weekdays and holidays: ["YYYY-MM-DD"]',
                    ),
                ),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("updated_at", models.DateTimeField(auto_now=True)),
                (
                    "tenant",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="calendars", to="scheduler_app.tenant"
                    ),
                ),
            ],
        ),
        migrations.AddField(
            model_name="job",
            name="calendar",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="jobs",
                to="scheduler_app.calendar",
            ),
        ),
        AddIndexConcurrentlyOnPostgres(
            model_name="job",
            index=models.Index(
                condition=models.Q(("calendar__isnull", False)), fields=["calendar"], name="job_calendar_idx"
            ),
        ),
        migrations.AddConstraint(
            model_name="calendar",
            constraint=models.UniqueConstraint(fields=("tenant", "name"), name="calendar_name_unique_per_tenant"),
        ),
    ]
