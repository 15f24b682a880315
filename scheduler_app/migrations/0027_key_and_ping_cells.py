"""Cells (docs/scaling.md: Routing): the cell an API key and a ping URL name, so that the
routing proxy can be told where a moved tenant's keys and pings now go. Constant database
defaults, stored in the catalogue: neither table is rewritten."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("scheduler_app", "0026_job_flexible_windows"),
    ]

    operations = [
        migrations.AddField(
            model_name="apikey",
            name="cell",
            field=models.CharField(blank=True, db_default="", default="", editable=False, max_length=16),
        ),
        migrations.AddField(
            model_name="monitor",
            name="cell",
            field=models.CharField(blank=True, db_default="", default="", editable=False, max_length=16),
        ),
    ]
