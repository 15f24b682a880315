"""The alert kind a job that paused itself raises (auto_paused): choices only, no table change."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("scheduler_app", "0021_calendars"),
    ]

    operations = [
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
                ],
                max_length=16,
            ),
        ),
    ]
