from django.apps import AppConfig


class RunsAppConfig(AppConfig):
    name = "runs_app"
    label = "runs_app"
    verbose_name = "Runs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The runtime is plain Python; this is where goaai's Django project wires it
        # in: its config from the settings, the ORM store, and Celery as an executor.
        from goaai.model_limits import model_limits
        from goaai.runtime import rt
        from goaai.runtime_settings import runtime_config
        from runs_app.agents import DatabaseAgents
        from runs_app.store import OrmRunStore
        from runs_app.tasks import CeleryExecutor

        self.check_runtime()
        self.keep_rollups()
        rt.install(
            config=runtime_config,
            store=OrmRunStore,
            executors={"celery": CeleryExecutor},
            limits=model_limits,
            agents=DatabaseAgents(),
        )

    def keep_rollups(self) -> None:
        """A session deleted through the ORM (the API, the admin, with its owner)
        takes its runs out of the dashboard's rollups; the purge, which deletes
        without the ORM, does it itself. A database migrated from before the
        rollups has them counted once, after its migrations."""
        from django.db.models.signals import post_migrate, pre_delete

        from runs_app.rollups import count_if_missing, session_deleting
        from sessions_app.models import Session

        pre_delete.connect(session_deleting, sender=Session, dispatch_uid="rollups_session")
        post_migrate.connect(count_if_missing, sender=self, dispatch_uid="rollups_migrate")

    @staticmethod
    def check_runtime() -> None:
        """Stop the process, with its name, at a bad model profile, MCP server or
        agent (one naming an MCP server that is not declared): not with errors on
        the first run that needs it."""
        from django.core.exceptions import ImproperlyConfigured

        from goaai.runtime.agents import check_agents
        from goaai.runtime.config import ConfigError
        from goaai.runtime_settings import runtime_config

        try:
            check_agents(runtime_config())
        except ConfigError as exc:
            raise ImproperlyConfigured(f"goaai cannot start: {exc}") from exc
