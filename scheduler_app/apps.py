from django.apps import AppConfig
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from scheduler_app.conf import app_settings


class SchedulerAppConfig(AppConfig):
    name = "scheduler_app"
    verbose_name = "Cronfleet scheduler"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Register the built-in tasks in every process, not only in Celery workers (where
        # autodiscovery imports them): execute_run looks targets up in the app's registry.
        # Imported here, not at the top: models and tasks may be imported only once the app
        # registry is ready, which is what ready() is called for.
        from scheduler_app import checks, tasks  # noqa: F401 (registers the checks and the tasks)
        from scheduler_app.targets import command, sql

        try:  # a broken allow-list stops start-up, not the first run that uses it
            command.validate_config(app_settings.COMMANDS)
        except command.InvalidCommand as exc:
            raise ImproperlyConfigured(str(exc)) from None
        try:  # its shape here; a worker also refuses to start if it cannot switch to it
            command.check_user_name(app_settings.COMMAND_USER)
        except command.CommandUserError as exc:
            raise ImproperlyConfigured(f"CRONFLEET_COMMAND_USER: {exc}") from None
        try:
            sql.validate_config(app_settings.SQL, settings.DATABASES)
        except sql.InvalidSql as exc:
            raise ImproperlyConfigured(str(exc)) from None
