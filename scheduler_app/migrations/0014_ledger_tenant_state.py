"""The ledger's (tenant_id, state) index in place of the tenant foreign key's own (tenant_id)
index: the admin's ledger counts a tenant's runs in one state from the index alone. Built
first, then the old one dropped, so lookups by tenant always have an index.

On PostgreSQL both CONCURRENTLY (scheduler_app/migrationops.py), so beats and workers go on
writing the ledger meanwhile; the foreign key's constraint is left as it is (Django's own
AlterField would drop it and add it back, checking every run while writes wait).
"""

import django.db.models.deletion
from django.db import migrations, models

from scheduler_app.migrationops import AddIndexConcurrentlyOnPostgres, drop_column_index


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY

    dependencies = [
        ("scheduler_app", "0013_nodes"),
    ]

    operations = [
        AddIndexConcurrentlyOnPostgres(
            model_name="jobrun",
            index=models.Index(fields=["tenant", "state"], name="jobrun_tenant_state_idx"),
        ),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="jobrun",
                    name="tenant",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="runs",
                        to="scheduler_app.tenant",
                    ),
                )
            ],
            database_operations=[
                drop_column_index("scheduler_app_jobrun", "tenant_id", "scheduler_app_jobrun_tenant_id_1bb4eedc")
            ],
        ),
    ]
