"""The ``rt`` facade on its own, as a script uses it: no Django, no database; the
runtime keeps its sessions, runs and memory in memory."""

from __future__ import annotations

import pytest

from goaai.runtime.config import RuntimeConfig
from goaai.runtime.errors import ModelError
from goaai.runtime.facade import Runtime
from goaai.runtime.models import get_model_client
from goaai.runtime.vocabulary import RunStatus


def _runtime(**config: object) -> Runtime:
    runtime = Runtime()
    runtime.configure(config=RuntimeConfig(**config), executor="inline")  # type: ignore[arg-type]
    return runtime


def test_a_runtime_of_its_own_runs_the_scripted_agent_and_remembers():
    rt = _runtime()
    session = rt.create_session(owner=7, agent="assistant", metadata={"user_id": "user-7"})

    told = rt.run("assistant", "remember my favourite colour is green", session=session.id)
    asked = rt.run("assistant", "what is my favourite colour?", session=session.id)

    assert told.status == RunStatus.COMPLETED
    assert asked.output == "Your favourite colour is green."
    assert rt.get_memory("favourite colour", session=session.id).value == "green"


def test_label_rules_from_the_config_shape_a_run():
    rt = _runtime()
    rt.configure(
        config=RuntimeConfig.from_values(
            label_rules=[{"name": "no_tools", "match": {"tier": "free"}, "max_tool_calls": 0}]
        )
    )
    session = rt.create_session(owner=7, agent="assistant")

    run = rt.run("assistant", "calculate 2 * (3 + 4)", session=session.id, labels={"tier": "free"})

    assert run.status == RunStatus.FAILED
    assert run.error is not None
    assert "tool call" in run.error.message


def test_a_provider_without_a_key_in_the_config_is_an_unavailable_model():
    rt = _runtime()

    with pytest.raises(ModelError) as raised:
        get_model_client("openai:gpt-4o-mini", rt.config.profiles)

    assert (raised.value.kind, raised.value.retryable) == ("unavailable", False)


def test_a_provider_key_in_the_config_builds_its_client():
    rt = Runtime()
    config = RuntimeConfig.from_values(environ={"OPENAI_API_KEY": "sk-test"})
    rt.configure(config=config, executor="inline")

    client = get_model_client("openai:gpt-4o-mini", rt.config.profiles)

    assert client.name == "openai:gpt-4o-mini"
