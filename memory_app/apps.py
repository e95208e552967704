from django.apps import AppConfig


class MemoryAppConfig(AppConfig):
    name = "memory_app"
    label = "memory_app"
    verbose_name = "Memory"
    default_auto_field = "django.db.models.BigAutoField"
