"""The "back up" alert of a monitored job (kind checkin_up: choices only) and the chat channel
of alert rules (chat_url: a constant database default, stored in the catalogue, so the table
is not rewritten)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("scheduler_app", "0027_key_and_ping_cells"),
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
                    ("checkin_up", "Checkin Up"),
                ],
                max_length=16,
            ),
        ),
        migrations.AddField(
            model_name="alertrule",
            name="chat_url",
            field=models.CharField(
                blank=True,
                db_default="",
                default="",
                help_text='A Slack-compatible incoming webhook (Slack, Mattermost, Rocket.Chat): POSTed {"text": ...}',
                max_length=2000,
            ),
        ),
    ]
