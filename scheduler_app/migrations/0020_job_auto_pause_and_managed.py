"""A job's pause after repeated failure (pause_after_failures, its count and when it paused
itself) and its owner under schedules as code (managed_by, and the digest of the declaration
last applied). Every column has a database default, so rows written by raw SQL need none."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("scheduler_app", "0019_staff_permissions"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="auto_paused_at",
            field=models.DateTimeField(blank=True, editable=False, null=True),
        ),
        migrations.AddField(
            model_name="job",
            name="consecutive_failures",
            field=models.PositiveIntegerField(db_default=0, default=0, editable=False),
        ),
        migrations.AddField(
            model_name="job",
            name="managed_by",
            field=models.CharField(blank=True, db_default="", default="", editable=False, max_length=100),
        ),
        migrations.AddField(
            model_name="job",
            name="managed_digest",
            field=models.CharField(blank=True, db_default="", default="", editable=False, max_length=64),
        ),
        migrations.AddField(
            model_name="job",
            name="pause_after_failures",
            field=models.PositiveSmallIntegerField(
                blank=True,
                help_text="Pause the job after this many failed or dead runs in a row; blank: never",
                null=True,
            ),
        ),
    ]
