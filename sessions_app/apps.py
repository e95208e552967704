from django.apps import AppConfig


class SessionsAppConfig(AppConfig):
    # An explicit label: "sessions" is taken by django.contrib.sessions.
    name = "sessions_app"
    label = "sessions_app"
    verbose_name = "Chat sessions"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Live streams close when the access they were opened with goes.
        from sessions_app import signals

        signals.connect()
