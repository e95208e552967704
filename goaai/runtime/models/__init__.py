"""Model clients, chosen by the agent's ``model`` string."""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache

from goaai.runtime.config import ModelProfile, import_string
from goaai.runtime.errors import ModelError, UnknownAgent
from goaai.runtime.models.anthropic_client import AnthropicModel
from goaai.runtime.models.base import (
    DeltaCallback,
    ModelClient,
    ModelRequest,
    ModelSettings,
    ToolSpec,
)
from goaai.runtime.models.openai_compat import OpenAICompatibleModel
from goaai.runtime.models.openai_responses import OpenAIResponsesModel
from goaai.runtime.models.scripted import ScriptedModel
from goaai.runtime.vocabulary import ErrorKind

__all__ = [
    "DeltaCallback",
    "ModelClient",
    "ModelRequest",
    "ModelSettings",
    "ToolSpec",
    "check_model",
    "get_model_client",
]


def check_model(model: str, profiles: Mapping[str, ModelProfile]) -> None:
    """:class:`UnknownAgent` unless ``model`` names a client goaai can build:
    ``scripted``, ``python:<dotted.path.Class>`` or ``<profile>:<model>`` of a
    declared profile (its key may still be missing: that fails the run, not this)."""
    if model == "scripted":
        return
    if model.startswith("python:"):
        import_string(model.removeprefix("python:"))
        return
    profile, _, name = model.partition(":")
    if not name or profile not in profiles:
        known = ", ".join(sorted(profiles))
        raise UnknownAgent(
            f"No model client for {model!r}: use scripted, python:<dotted.path> or "
            f"<profile>:<model> with a profile of {known}."
        )


def get_model_client(model: str, profiles: Mapping[str, ModelProfile]) -> ModelClient:
    """The client for an agent's ``model`` setting.

    ``scripted`` is the offline model; ``python:<dotted.path.Class>`` a client class
    of your own; ``<profile>:<model>`` a model of one of the deployment's profiles
    (``openai:gpt-4.1``, ``anthropic:claude-sonnet-4-5``, ``local:qwen3`` for a profile
    ``local`` pointing at Ollama). A profile without its API key raises
    :class:`ModelError` (``unavailable``), which fails the run that asked for it
    rather than the process.
    """
    check_model(model, profiles)
    if model == "scripted":
        return ScriptedModel()
    if model.startswith("python:"):
        # A client class of the deployment's own, by dotted path.
        client: ModelClient = import_string(model.removeprefix("python:"))()
        return client
    name, _, model_name = model.partition(":")
    profile = profiles[name]
    if not profile.api_key:
        local = profile.kind != "anthropic"
        hint = " (any value for a local server such as Ollama)" if local else ""
        raise ModelError(
            ErrorKind.UNAVAILABLE,
            f"No API key configured for the model profile {name!r}: "
            f"set {profile.api_key_env or 'its api_key_env variable'}{hint}",
            retryable=False,
        )
    return _profile_client(profile, model_name)


# One client per profile and model, shared by every run: each holds a pool of HTTP
# connections that a client per run would open again (and leave to the garbage
# collector). What the clients keep between calls is safe to share (the Responses
# client remembers settings a server refused), so threads may share them.
@lru_cache(maxsize=64)
def _profile_client(profile: ModelProfile, model: str) -> ModelClient:
    if profile.kind == "anthropic":
        return AnthropicModel(model, profile=profile)
    if profile.kind == "openai-responses":
        return OpenAIResponsesModel(model, profile=profile)
    return OpenAICompatibleModel(model, profile=profile)
