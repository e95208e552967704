"""The runtime's config, built from goaai's Django settings (the runtime itself
reads no settings: see ``goaai.runtime.config``)."""

from __future__ import annotations

from django.conf import settings

from goaai.runtime.config import RuntimeConfig


def runtime_config() -> RuntimeConfig:
    """The settings' ``GOAAI_*`` values as the runtime's one config object."""
    return RuntimeConfig.from_values(
        executor=settings.GOAAI_EXECUTOR,
        executor_threads=settings.GOAAI_EXECUTOR_THREADS,
        agents=list(settings.GOAAI_AGENTS),
        run_wait_seconds=settings.GOAAI_RUN_WAIT_SECONDS,
        run_lease_seconds=settings.GOAAI_RUN_LEASE_SECONDS,
        reaper_interval=settings.GOAAI_REAPER_INTERVAL,
        label_rules=list(settings.GOAAI_LABEL_RULES),
        profiles=settings.GOAAI_MODEL_PROFILES,
        mcp_servers=settings.GOAAI_MCP_SERVERS,
        memory_embeddings=settings.GOAAI_MEMORY_EMBEDDINGS,
    )
