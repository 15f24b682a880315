"""Flexible windows (docs/flexible-windows.md): a job's window, the scope whose load its
placement avoided, and why it fired where it does. Each column has a constant database
default, which PostgreSQL stores in the catalogue: the live job table is not rewritten, and
rows written by raw SQL need none of them."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("scheduler_app", "0025_checkins"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="flex_note",
            field=models.CharField(blank=True, db_default="", default="", editable=False, max_length=300),
        ),
        migrations.AddField(
            model_name="job",
            name="flex_scope",
            field=models.CharField(
                blank=True, choices=[("tenant", "tenant"), ("queue", "queue")], db_default="", default="", max_length=8
            ),
        ),
        migrations.AddField(
            model_name="job",
            name="flex_window",
            field=models.CharField(
                blank=True,
                db_default="",
                default="",
                help_text="Fire once in this window at its least loaded minute: 'daily HH:MM-HH:MM' or 'hourly'; blank: a fixed schedule",
                max_length=40,
            ),
        ),
    ]
