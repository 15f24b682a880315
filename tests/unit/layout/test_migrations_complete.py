"""The models and the migrations agree: a model change comes with its migration (a missing
one would be made by the first `makemigrations` of a host project, outside the app). The
autodetector `makemigrations --check` runs, without a database."""

from django.apps import apps
from django.db.migrations.autodetector import MigrationAutodetector
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.state import ProjectState


def test_no_model_change_is_without_its_migration():
    loader = MigrationLoader(None, ignore_no_migrations=True)
    detector = MigrationAutodetector(loader.project_state(), ProjectState.from_apps(apps))

    changes = detector.changes(graph=loader.graph, trim_to_apps={"scheduler_app"})

    assert "scheduler_app" not in changes, [op.describe() for m in changes["scheduler_app"] for op in m.operations]
