"""The runtime's settings, as one plain object.

The runtime reads no framework's settings: a deployment builds a
:class:`RuntimeConfig` once (goaai's Django project does it from its settings, see
``goaai.runtime_settings``) and hands it to the facade. The defaults are what an
embedded runtime needs: worker threads, the shipped agents, no provider keys.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from goaai.runtime.policy import LabelRule

PROVIDERS = ("openai", "anthropic")


@dataclass(frozen=True)
class ProviderConfig:
    """How to reach one model provider: its key, and a base URL for a compatible
    server (Ollama, vLLM or llama.cpp for OpenAI's protocol)."""

    api_key: str = ""
    base_url: str | None = None


def _no_providers() -> Mapping[str, ProviderConfig]:
    return MappingProxyType({})


@dataclass(frozen=True)
class RuntimeConfig:
    # "thread" (a pool of worker threads in this process), "inline" (the caller's
    # thread) or the name of an executor the deployment installed ("celery").
    executor: str = "thread"
    executor_threads: int = 4
    # Extra agents, as dotted paths to ``goaai.runtime.agents.Agent`` objects.
    agents: tuple[str, ...] = ()
    # How long ``rt.run()`` waits for a run before it stops waiting (the run goes on).
    run_wait_seconds: float = 300
    # A worker's lease on the run it executes (renewed every third of it).
    run_lease_seconds: float = 60
    # How often a process looks for runs whose worker died (0: never).
    reaper_interval: float = 15
    label_rules: tuple[LabelRule, ...] = ()
    providers: Mapping[str, ProviderConfig] = field(default_factory=_no_providers)

    @classmethod
    def from_values(
        cls,
        *,
        label_rules: list[dict[str, Any]] | tuple[dict[str, Any], ...] = (),
        providers: Mapping[str, Mapping[str, Any]] | None = None,
        agents: list[str] | tuple[str, ...] = (),
        **values: Any,
    ) -> RuntimeConfig:
        """A config from plain values (as settings or a JSON file hold them)."""
        return cls(
            label_rules=tuple(LabelRule.from_dict(rule) for rule in label_rules),
            providers=MappingProxyType(
                {
                    name: ProviderConfig(
                        api_key=str(provider.get("api_key") or ""),
                        base_url=provider.get("base_url") or None,
                    )
                    for name, provider in (providers or {}).items()
                }
            ),
            agents=tuple(agents),
            **values,
        )

    def provider(self, name: str) -> ProviderConfig:
        return self.providers.get(name) or ProviderConfig()


def import_string(dotted_path: str) -> Any:
    """The object a dotted path ``package.module.name`` names."""
    module_path, _, name = dotted_path.rpartition(".")
    if not module_path:
        raise ImportError(f"{dotted_path!r} is not a dotted path to an object.")
    module = importlib.import_module(module_path)
    try:
        return getattr(module, name)
    except AttributeError as exc:
        raise ImportError(f"Module {module_path!r} has no {name!r}.") from exc
