"""Two permissions of Cronfleet's own beside Django's view/add/change/delete (docs/roles.md):
making an API key (apikey.mint_apikey) and changing a tenant's quotas, weight and retention
(tenant.change_tenant_quotas). Options only: no table changes."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("scheduler_app", "0018_alert_tenant_index"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="apikey",
            options={
                "ordering": ["-created_at", "-id"],
                "permissions": [("mint_apikey", "Can make an API key (shown once) for a tenant")],
                "verbose_name": "API key",
            },
        ),
        migrations.AlterModelOptions(
            name="tenant",
            options={
                "ordering": ["slug"],
                "permissions": [("change_tenant_quotas", "Can change a tenant's quotas, weight and retention")],
            },
        ),
    ]
