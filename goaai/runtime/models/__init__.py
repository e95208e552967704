"""Model clients, chosen by the agent's ``model`` string."""

from __future__ import annotations

from goaai.runtime.models.base import DeltaCallback, ModelClient, ModelRequest, ToolSpec
from goaai.runtime.models.scripted import ScriptedModel

__all__ = ["DeltaCallback", "ModelClient", "ModelRequest", "ToolSpec", "get_model_client"]


def get_model_client(model: str) -> ModelClient:
    """The client for an agent's ``model`` setting, e.g. ``scripted``."""
    if model == "scripted":
        return ScriptedModel()
    from goaai.runtime.errors import UnknownAgent

    raise UnknownAgent(f"No model client for {model!r}.")
