from django.apps import AppConfig


class SchedulerAppConfig(AppConfig):
    name = "scheduler_app"
    verbose_name = "Cronfleet scheduler"
    default_auto_field = "django.db.models.BigAutoField"
