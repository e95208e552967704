"""Model clients, chosen by the agent's ``model`` string."""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache

from goaai.runtime.config import PROVIDERS, ProviderConfig, import_string
from goaai.runtime.errors import ModelError, UnknownAgent
from goaai.runtime.models.anthropic_client import AnthropicModel
from goaai.runtime.models.base import DeltaCallback, ModelClient, ModelRequest, ToolSpec
from goaai.runtime.models.openai_compat import OpenAICompatibleModel
from goaai.runtime.models.scripted import ScriptedModel
from goaai.runtime.vocabulary import ErrorKind

__all__ = ["DeltaCallback", "ModelClient", "ModelRequest", "ToolSpec", "get_model_client"]


def get_model_client(
    model: str, providers: Mapping[str, ProviderConfig] | None = None
) -> ModelClient:
    """The client for an agent's ``model`` setting.

    ``scripted`` is the offline model; ``python:<dotted.path.Class>`` a client class
    of your own; ``openai:<model>`` any server that speaks
    OpenAI's Chat Completions (the provider's ``base_url`` points it at Ollama, vLLM
    or llama.cpp); ``anthropic:<model>`` Anthropic's Messages API. ``providers`` holds
    each provider's key and URL (the runtime's config). A provider without an API key
    raises :class:`ModelError` (``unavailable``), which fails the run that
    asked for it rather than the process.
    """
    if model == "scripted":
        return ScriptedModel()
    if model.startswith("python:"):
        # A client class of the deployment's own, by dotted path.
        client: ModelClient = import_string(model.removeprefix("python:"))()
        return client
    provider, _, name = model.partition(":")
    if not name or provider not in PROVIDERS:
        raise UnknownAgent(f"No model client for {model!r}.")

    settings = (providers or {}).get(provider) or ProviderConfig()
    api_key, base_url = settings.api_key, settings.base_url
    if not api_key:
        hint = " (any value for a local server such as Ollama)" if provider == "openai" else ""
        raise ModelError(
            ErrorKind.UNAVAILABLE,
            f"No API key configured for {provider}: set {provider.upper()}_API_KEY{hint}",
            retryable=False,
        )
    return _provider_client(provider, name, api_key, base_url)


# One client per configuration, shared by every run: each holds a pool of HTTP
# connections that a client per run would open again (and leave to the garbage
# collector). The clients keep no state between calls, so threads may share them.
@lru_cache(maxsize=32)
def _provider_client(provider: str, name: str, api_key: str, base_url: str | None) -> ModelClient:
    if provider == "openai":
        return OpenAICompatibleModel(name, api_key=api_key, base_url=base_url)
    return AnthropicModel(name, api_key=api_key, base_url=base_url)
