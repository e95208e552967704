"""Declaring MCP servers: the settings' JSON, an agent's own, and the checks that
name the bad server."""

from __future__ import annotations

import mcp_types
import pytest
from django.core.exceptions import ImproperlyConfigured

from goaai.runtime.agents import Agent, AgentRegistry, check_agent, check_agents
from goaai.runtime.config import ConfigError, McpServer, RuntimeConfig, parse_mcp_servers
from goaai.runtime.tools.mcp import outcome_of
from goaai.runtime.vocabulary import ErrorKind
from runs_app.apps import RunsAppConfig


def test_the_shape_mcp_clients_share():
    servers = parse_mcp_servers(
        {
            "time": {"command": "python", "args": ["-m", "mcp_server_time"], "env": {"TZ": "UTC"}},
            "docs": {"url": "https://docs.example.com/mcp", "headers": {"X-Key": "k"}},
        }
    )

    time, docs = servers["time"], servers["docs"]
    assert (time.transport, time.command, time.args, time.env) == (
        "stdio",
        "python",
        ("-m", "mcp_server_time"),
        (("TZ", "UTC"),),
    )
    assert (docs.transport, docs.url, docs.headers) == ("http", docs.url, (("X-Key", "k"),))
    assert (time.trusted, time.timeout_seconds, time.tools) == (False, 30.0, None)
    # A client's whole file, with its "mcpServers" key, is accepted too.
    assert parse_mcp_servers({"mcpServers": {"time": {"command": "python"}}})["time"].command


@pytest.mark.parametrize(
    ("declared", "message"),
    [
        ({"t": {}}, "MCP server 't': give either a command .* not neither"),
        ({"t": {"command": "x", "url": "http://h/mcp"}}, "MCP server 't': .* not both"),
        ({"t": {"url": "ftp://h"}}, "MCP server 't': url must be an http"),
        ({"t": {"command": "x", "trusted": "yes"}}, "MCP server 't': trusted must be true"),
        ({"t": {"command": "x", "timeout_seconds": 0}}, "MCP server 't': timeout_seconds"),
        ({"t": {"command": "x", "args": "-m x"}}, "MCP server 't': args must be a list"),
        ({"t": {"command": "x", "colour": 1}}, "MCP server 't': unknown setting 'colour'"),
        ({"t": {"command": "x", "headers": {}}}, "MCP server 't': headers belong"),
        ({"t": {"url": "http://h", "type": "sse"}}, "MCP server 't': type 'sse'"),
        ({"bad name": {"command": "x"}}, "MCP server 'bad name': a name"),
        (["time"], "GOAAI_MCP_SERVERS must be an object"),
    ],
)
def test_bad_declarations_name_the_server(declared, message):
    with pytest.raises(ConfigError, match=message):
        RuntimeConfig.from_values(mcp_servers=declared, environ={})


def test_an_agent_naming_an_unknown_server_is_refused_with_both_names():
    config = RuntimeConfig(mcp_servers=parse_mcp_servers({"time": {"command": "python"}}))
    agent = Agent.from_dict({"id": "helper", "description": "", "toolsets": ["mcp:docs"]})

    with pytest.raises(ConfigError, match=r"Agent 'helper': toolsets: no MCP server 'docs'.*time"):
        check_agent(agent, AgentRegistry([agent]), config)


def test_an_agent_may_declare_servers_of_its_own():
    agent = Agent.from_dict(
        {
            "id": "helper",
            "description": "",
            "toolsets": ["mcp:mine"],
            "mcp_servers": {"mine": {"command": "python", "trusted": True}},
        }
    )

    check_agent(agent, AgentRegistry([agent]), RuntimeConfig())
    assert agent.mcp_server("mine") == McpServer(name="mine", command="python", trusted=True)
    assert Agent.from_dict(agent.as_dict()) == agent
    with pytest.raises(ConfigError, match=r"^mcp_servers: MCP server 'x': give either"):
        Agent.from_dict({"id": "a", "mcp_servers": {"x": {}}})


def test_an_agent_without_servers_keeps_its_definition():
    agent = Agent.from_dict({"id": "plain", "toolsets": ["clock"]})

    assert "mcp_servers" not in agent.as_dict()


def test_startup_refuses_a_bad_server_with_its_name(settings):
    settings.GOAAI_MCP_SERVERS = {"time": {"args": ["-m", "mcp_server_time"]}}
    with pytest.raises(ImproperlyConfigured, match=r"goaai cannot start: MCP server 'time'"):
        RunsAppConfig.check_runtime()


def test_startup_refuses_an_agent_naming_an_unknown_server():
    config = RuntimeConfig(agents=("tests.goaai.runtime.tools.test_mcp_config.NAMES_GHOST",))

    with pytest.raises(ConfigError, match=r"Agent 'ghostly': toolsets: no MCP server 'ghost'"):
        check_agents(config)


NAMES_GHOST = Agent(id="ghostly", description="", toolsets=("mcp:ghost",))


def test_results_become_what_the_call_records():
    text = mcp_types.TextContent(type="text", text="12:00")
    image = mcp_types.ImageContent(type="image", data="aGVsbG8=", mime_type="image/png")

    structured = outcome_of(
        "t", mcp_types.CallToolResult(content=[text], structured_content={"a": 1})
    )
    plain = outcome_of("t", mcp_types.CallToolResult(content=[text, image]))
    failed = outcome_of("t", mcp_types.CallToolResult(content=[text], is_error=True))

    assert structured.result == {"a": 1}
    assert plain.result == {
        "text": "12:00",
        "content": [{"type": "image", "data": "<8 base64 characters>", "mimeType": "image/png"}],
    }
    assert (failed.error_kind, failed.error_message) == (ErrorKind.DOMAIN_REJECTION, "12:00")
