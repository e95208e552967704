"""An agent's conversation starters (``conversation.suggestions``): the messages the
chat offers to start an empty conversation with it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from goaai.runtime.agents import ASSISTANT, CONCIERGE, Agent
from goaai.runtime.config import ConfigError
from goaai.runtime.conversation import MAX_SUGGESTIONS, ConversationSettings


def test_the_built_in_agents_suggest_what_they_can_do():
    assert "calculate 2 * (3 + 4)" in ASSISTANT.conversation.suggestions
    assert any(s.startswith("ask the assistant") for s in CONCIERGE.conversation.suggestions)


def test_suggestions_survive_the_definition_round_trip():
    definition = ASSISTANT.as_dict()
    assert definition["conversation"]["suggestions"] == list(ASSISTANT.conversation.suggestions)

    again = Agent.from_dict(definition)

    assert again.conversation.suggestions == ASSISTANT.conversation.suggestions
    assert again.fingerprint() == ASSISTANT.fingerprint()


def test_an_agent_without_suggestions_keeps_the_definition_it_had():
    plain = replace(ASSISTANT, conversation=ConversationSettings())
    assert "suggestions" not in plain.as_dict()["conversation"]
    assert ConversationSettings.from_dict({}).suggestions == ()


def test_blanks_around_are_trimmed_and_repeats_dropped():
    settings = ConversationSettings.from_dict({"suggestions": [" hello ", "hello", "echo hi"]})
    assert settings.suggestions == ("hello", "echo hi")


@pytest.mark.parametrize(
    ("suggestions", "said"),
    [
        ("hello", "must be a list"),
        ([1, 2], "must be a list"),
        ([""], "1 to 200 characters"),
        (["   "], "1 to 200 characters"),
        (["x" * 201], "1 to 200 characters"),
        (["nul\x00"], "1 to 200 characters"),
        ([f"message {n}" for n in range(MAX_SUGGESTIONS + 1)], f"at most {MAX_SUGGESTIONS}"),
    ],
)
def test_bad_suggestions_are_refused_with_what_is_wrong(suggestions, said):
    with pytest.raises(ConfigError, match=r"conversation\.suggestions") as raised:
        Agent.from_dict({"id": "tutor", "conversation": {"suggestions": suggestions}})
    assert said in str(raised.value)
