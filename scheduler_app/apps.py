from django.apps import AppConfig


class SchedulerAppConfig(AppConfig):
    name = "scheduler_app"
    verbose_name = "Cronfleet scheduler"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Register the built-in tasks in every process, not only in Celery workers (where
        # autodiscovery imports them): execute_run looks targets up in the app's registry.
        from scheduler_app import tasks  # noqa: F401
