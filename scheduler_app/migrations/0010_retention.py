"""Retention: per-tenant and per-job policy fields, the two small indexes pruning needs, and
one index fewer on the ledger (job_id alone, which jobrun_one_per_fire already covers).

On PostgreSQL the indexes are built and dropped CONCURRENTLY (so the migration is not
atomic): a plain CREATE INDEX would hold off every beat's claim of the job table while it
reads the table, and a plain DROP INDEX would wait for, then block, every use of the ledger.
Pruning runs needs no new index of the ledger itself (see scheduler_app/retention.py).
"""

from django.db import migrations, models


class AddIndexConcurrentlyOnPostgres(migrations.AddIndex):
    """AddIndex, built CONCURRENTLY on PostgreSQL (SQLite has no such thing, nor the need)."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor != "postgresql":
            return super().database_forwards(app_label, schema_editor, from_state, to_state)
        model = to_state.apps.get_model(app_label, self.model_name)
        if self.allow_migrate_model(schema_editor.connection.alias, model):
            schema_editor.add_index(model, self.index, concurrently=True)

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor != "postgresql":
            return super().database_backwards(app_label, schema_editor, from_state, to_state)
        model = from_state.apps.get_model(app_label, self.model_name)
        if self.allow_migrate_model(schema_editor.connection.alias, model):
            schema_editor.remove_index(model, self.index, concurrently=True)


# Django's name for the index of JobRun.job that the field had (db_index) until now.
JOB_ID_INDEX = "scheduler_app_jobrun_job_id_4f251f58"


def drop_job_id_index(apps, schema_editor):
    concurrently = "CONCURRENTLY " if schema_editor.connection.vendor == "postgresql" else ""
    schema_editor.execute(f"DROP INDEX {concurrently}IF EXISTS {JOB_ID_INDEX}")


def create_job_id_index(apps, schema_editor):
    concurrently = "CONCURRENTLY " if schema_editor.connection.vendor == "postgresql" else ""
    schema_editor.execute(f"CREATE INDEX {concurrently}IF NOT EXISTS {JOB_ID_INDEX} ON scheduler_app_jobrun (job_id)")


def days_field(help_text):
    return models.PositiveIntegerField(blank=True, null=True, help_text=help_text)


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY

    dependencies = [
        ('scheduler_app', '0009_job_batch'),
    ]

    operations = [
        migrations.AddField(
            model_name='tenant',
            name='retention_days',
            field=days_field('Days finished runs are kept (0: forever); blank: CRONFLEET_RETENTION_DAYS'),
        ),
        migrations.AddField(
            model_name='tenant',
            name='retention_failed_days',
            field=days_field('Days failed and dead runs are kept, at least as long as the others (0: forever); '
                             'blank: CRONFLEET_RETENTION_FAILED_DAYS'),
        ),
        migrations.AddField(
            model_name='tenant',
            name='retention_keep_last',
            field=days_field("A job's newest runs kept whatever their age (0: none); "
                             "blank: CRONFLEET_RETENTION_KEEP_LAST"),
        ),
        migrations.AddField(
            model_name='job',
            name='retention_days',
            field=days_field("Days finished runs are kept (0: forever); blank: the tenant's"),
        ),
        migrations.AddField(
            model_name='job',
            name='retention_failed_days',
            field=days_field("Days failed and dead runs are kept, at least as long as the others (0: forever); "
                             "blank: the tenant's"),
        ),
        migrations.AddField(
            model_name='job',
            name='retention_keep_last',
            field=days_field("The job's newest runs kept whatever their age (0: none); blank: the tenant's"),
        ),
        AddIndexConcurrentlyOnPostgres(
            model_name='job',
            index=models.Index(
                condition=models.Q(('retention_days__isnull', False), ('retention_failed_days__isnull', False),
                                   ('retention_keep_last__isnull', False), _connector='OR'),
                fields=['tenant', 'id'], name='job_retention_idx'),
        ),
        # The ledger's index of job_id alone duplicated the front of jobrun_one_per_fire.
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.AlterField(
                model_name='jobrun',
                name='job',
                field=models.ForeignKey(db_index=False, on_delete=models.deletion.CASCADE, related_name='runs',
                                        to='scheduler_app.job'),
            )],
            database_operations=[migrations.RunPython(drop_job_id_index, create_job_id_index)],
        ),
        AddIndexConcurrentlyOnPostgres(
            model_name='auditevent',
            index=models.Index(condition=models.Q(('run_id__isnull', False)), fields=['created_at'],
                               name='audit_run_created_idx'),
        ),
    ]
