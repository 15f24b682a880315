from django.apps import AppConfig


class SchedulerAppConfig(AppConfig):
    name = "scheduler_app"
    verbose_name = "Cronfleet scheduler"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Register the built-in tasks in every process, not only in Celery workers (where
        # autodiscovery imports them): execute_run looks targets up in the app's registry.
        from django.conf import settings
        from django.core.exceptions import ImproperlyConfigured

        from scheduler_app import commandjobs, sqljobs, tasks  # noqa: F401

        try:  # a broken allow-list stops start-up, not the first run that uses it
            commandjobs.validate_config(settings.CRONFLEET_COMMANDS)
        except commandjobs.InvalidCommand as exc:
            raise ImproperlyConfigured(str(exc)) from None
        try:
            sqljobs.validate_config(settings.CRONFLEET_SQL, settings.DATABASES)
        except sqljobs.InvalidSql as exc:
            raise ImproperlyConfigured(str(exc)) from None
