"""Model profiles: named provider connections, declared in the environment, checked
when goaai starts.

A bad profile or an agent whose model names no profile stops the process at start,
with the bad name in the message, instead of failing runs later.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from goaai.runtime.agents import Agent, check_agents
from goaai.runtime.config import ConfigError, RuntimeConfig, parse_profiles
from goaai.runtime.errors import ModelError
from goaai.runtime.models import get_model_client

PROJECT_ROOT = Path(__file__).resolve().parents[3]

LOCAL = {"kind": "openai", "base_url": "http://127.0.0.1:11434/v1", "api_key_env": "OLLAMA_KEY"}
# A code agent on a profile of its own, for the start-up checks below.
ON_LOCAL = Agent(id="on-local", description="Runs on a local server.", model="local:qwen3")
ON_MISSING = Agent(id="on-missing", description="Names no profile.", model="nowhere:qwen3")


def test_the_built_in_profiles_read_todays_variables():
    environ = {
        "OPENAI_API_KEY": "sk-o",
        "OPENAI_BASE_URL": "http://127.0.0.1:8000/v1",
        "ANTHROPIC_API_KEY": "sk-a",
    }

    profiles = parse_profiles(None, environ)

    assert (profiles["openai"].kind, profiles["openai"].api_key) == ("openai", "sk-o")
    assert profiles["openai"].base_url == "http://127.0.0.1:8000/v1"
    assert (profiles["anthropic"].kind, profiles["anthropic"].api_key) == ("anthropic", "sk-a")
    assert profiles["anthropic"].base_url is None


def test_declared_profiles_join_the_built_in_ones_and_read_their_own_key():
    profiles = parse_profiles(
        {"local": {**LOCAL, "timeout_seconds": 300, "headers": {"X-Team": "a"}}},
        {"OLLAMA_KEY": "ollama", "OPENAI_API_KEY": "sk-o"},
    )

    assert sorted(profiles) == ["anthropic", "local", "openai"]
    local = profiles["local"]
    assert (local.kind, local.base_url, local.api_key) == (
        "openai",
        "http://127.0.0.1:11434/v1",
        "ollama",
    )
    assert (local.timeout_seconds, local.headers) == (300.0, (("X-Team", "a"),))
    # The key is never shown.
    assert "ollama" not in repr(local)


def test_profiles_side_by_side_build_clients_of_their_own():
    config = RuntimeConfig.from_values(
        profiles={"local": LOCAL}, environ={"OLLAMA_KEY": "x", "ANTHROPIC_API_KEY": "sk-a"}
    )

    local = get_model_client("local:qwen3", config.profiles)
    claude = get_model_client("anthropic:claude-sonnet-4-5", config.profiles)

    assert (local.name, claude.name) == ("local:qwen3", "anthropic:claude-sonnet-4-5")
    assert type(local).__name__ == "OpenAICompatibleModel"
    assert type(claude).__name__ == "AnthropicModel"


def test_a_profile_without_its_key_fails_the_run_that_uses_it_not_the_process():
    config = RuntimeConfig.from_values(profiles={"local": LOCAL}, environ={})

    with pytest.raises(ModelError) as raised:
        get_model_client("local:qwen3", config.profiles)

    assert (raised.value.kind, raised.value.retryable) == ("unavailable", False)
    assert "'local'" in raised.value.message
    assert "OLLAMA_KEY" in raised.value.message


@pytest.mark.parametrize(
    ("declared", "named"),
    [
        ({"local": {**LOCAL, "kind": "ollama"}}, "'local': kind must be one of openai, anthropic"),
        ({"local": {**LOCAL, "base_url": "127.0.0.1:11434"}}, "'local': base_url must be an"),
        ({"local": {**LOCAL, "timeout": 30}}, "'local': unknown setting 'timeout'"),
        ({"local": {**LOCAL, "timeout_seconds": 0}}, "'local': timeout_seconds must be a positive"),
        ({"local": {**LOCAL, "max_concurrency": 0}}, "'local': max_concurrency must be a whole"),
        ({"local": {**LOCAL, "headers": {"X": 1}}}, "'local': headers must map"),
        ({"local": "openai"}, "'local': expected an object"),
        ({"bad name": LOCAL}, "name 'bad name'"),
        ({"scripted": LOCAL}, "name 'scripted'"),
        (["local"], "must be an object"),
    ],
)
def test_a_bad_profile_is_refused_with_its_name(declared, named):
    with pytest.raises(ConfigError) as raised:
        parse_profiles(declared, {})

    assert named in str(raised.value)


def test_agents_are_checked_against_the_profiles():
    config = RuntimeConfig.from_values(
        profiles={"local": LOCAL},
        agents=["tests.goaai.runtime.test_model_profiles.ON_LOCAL"],
        environ={},
    )
    assert "on-local" in check_agents(config)

    missing = RuntimeConfig.from_values(
        agents=["tests.goaai.runtime.test_model_profiles.ON_MISSING"], environ={}
    )
    with pytest.raises(ConfigError, match="Agent 'on-missing': No model client for 'nowhere:"):
        check_agents(missing)

    typo = RuntimeConfig.from_values(agents=["tests.goaai.runtime.no_such.AGENT"], environ={})
    with pytest.raises(ConfigError, match=r"Agent 'tests.goaai.runtime.no_such.AGENT' cannot be"):
        check_agents(typo)


# The process refuses to start


def _start(**env: str) -> subprocess.CompletedProcess[str]:
    environment = dict(os.environ, DJANGO_SETTINGS_MODULE="goaai.settings", **env)
    return subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=PROJECT_ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_bad_profile_stops_goaai_at_start_with_its_name():
    started = _start(GOAAI_MODEL_PROFILES=json.dumps({"local": {**LOCAL, "kind": "olama"}}))

    assert started.returncode != 0
    assert "goaai cannot start: Model profile 'local': kind must be one of" in started.stderr


def test_an_agent_typo_stops_goaai_at_start_with_its_name():
    started = _start(GOAAI_AGENTS="tests.goaai.runtime.test_model_profiles.ON_MISING")

    assert started.returncode != 0
    assert (
        "goaai cannot start: Agent 'tests.goaai.runtime.test_model_profiles.ON_MISING'"
        in started.stderr
    )


def test_an_agent_on_a_declared_profile_starts():
    started = _start(
        GOAAI_MODEL_PROFILES=json.dumps({"local": LOCAL}),
        GOAAI_AGENTS="tests.goaai.runtime.test_model_profiles.ON_LOCAL",
    )

    assert started.returncode == 0, started.stderr
