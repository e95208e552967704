from django.apps import AppConfig


class MemoryAppConfig(AppConfig):
    name = "memory_app"
    label = "memory_app"
    verbose_name = "Memory"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Vector similarity for memory ranked by meaning, in every SQLite connection
        # opened from here on (memory_app.vectors says how).
        from memory_app import vectors

        vectors.install()
