# The operator's console (issue 13): the ledger's index for manual and backfilled runs.
# Numbered 0011 beside the other branches' 0010s; merge migrations join them.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("scheduler_app", "0009_job_batch"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="jobrun",
            index=models.Index(condition=models.Q(("trigger", "schedule"), _negated=True), fields=["-scheduled_at"],
                               name="jobrun_triggered_idx"),
        ),
    ]
