from django.apps import AppConfig


class RunsAppConfig(AppConfig):
    name = "runs_app"
    label = "runs_app"
    verbose_name = "Runs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The runtime is plain Python; this is where goaai's Django project wires it
        # in: its config from the settings, the ORM store, and Celery as an executor.
        from goaai.runtime import rt
        from goaai.runtime_settings import runtime_config
        from runs_app.store import OrmRunStore
        from runs_app.tasks import CeleryExecutor

        rt.install(config=runtime_config, store=OrmRunStore, executors={"celery": CeleryExecutor})
