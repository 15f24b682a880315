"""The ledger's (tenant_id, state) index in place of the tenant foreign key's own (tenant_id)
index: the admin's ledger counts a tenant's runs in one state from the index alone. Built
first, then the old one dropped, so lookups by tenant always have an index."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("scheduler_app", "0013_nodes"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="jobrun",
            index=models.Index(fields=["tenant", "state"], name="jobrun_tenant_state_idx"),
        ),
        migrations.AlterField(
            model_name="jobrun",
            name="tenant",
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name="runs",
                                    to="scheduler_app.tenant"),
        ),
    ]
