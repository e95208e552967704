"""Agents kept as data in the operators' console, and every agent's versions.

Staff with ``runs_app.add_agentdefinition`` create agents, ``change_agentdefinition``
edit them. The form is checked as goaai checks agents at start (the model's
profile, toolsets, delegates, every setting), and saving a change that alters the
definition appends a version: runs record the version they executed, and the
versions are read-only, for audit.
"""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import admin
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from goaai.admin_base import ReadOnlyAdmin
from goaai.runtime import rt
from goaai.runtime.agents import Agent
from goaai.runtime.config import ConfigError
from runs_app import agents as agent_services
from runs_app.models import AgentDefinition, AgentVersion

# The most the agent page waits for its MCP servers, started all at once.
LISTING_SECONDS = 5.0


class AgentForm(forms.ModelForm):  # type: ignore[type-arg]
    class Meta:
        model = AgentDefinition
        fields = ["agent", *agent_services.EDITABLE_FIELDS]
        widgets = {"system_prompt": forms.Textarea(attrs={"rows": 12, "cols": 100})}
        help_texts = {
            "toolsets": 'A JSON list, e.g. ["memory", "clock"].',
            "policy": 'A JSON object of caps, e.g. {"max_turns": 6, "max_tool_calls": 10}.',
            "model_settings": "A JSON object: temperature, max_output_tokens, reasoning_effort, "
            "timeout_seconds, retry_attempts, retry_seconds.",
            "conversation": "A JSON object: context_tokens, tool_result_chars, memory_tokens, "
            "parallel_tool_calls, multitask (enqueue, reject or interrupt).",
            "mcp_servers": "A JSON object of MCP servers by name, named in the toolsets as "
            'mcp:<name>: {"time": {"command": "python", "args": ["-m", "mcp_server_time"], '
            '"trusted": true}} for a server goaai starts (superusers only), {"docs": {"url": '
            '"https://host/mcp", "headers": {}}} for one over streamable HTTP. Settings: '
            "trusted (no approval needed), timeout_seconds, startup_seconds, tools.",
        }

    # The person saving; set by the admin (only a superuser may declare a server
    # goaai starts as a command).
    user: Any = None

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        agent_id = data.get("agent") or (self.instance.agent if self.instance.pk else "")
        if not self.instance.pk and agent_id in rt.agents:
            self.add_error("agent", f"An agent named {agent_id!r} exists.")
            return data
        definition = {"id": agent_id, **{name: data.get(name) for name in _present(data)}}
        try:
            agent_services.check_commands(
                self.instance.mcp_servers if self.instance.pk else {},
                data.get("mcp_servers"),
                superuser=bool(self.user and self.user.is_superuser),
            )
            agent_services.check_definition(
                {**self.instance.as_definition(), **definition} if self.instance.pk else definition
            )
        except ConfigError as exc:
            raise forms.ValidationError(str(exc)) from None
        return data


def _present(data: dict[str, Any]) -> list[str]:
    return [name for name in agent_services.EDITABLE_FIELDS if data.get(name) is not None]


@admin.register(AgentDefinition)
class AgentDefinitionAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    form = AgentForm
    list_display = ["agent", "model", "version", "updated_by", "updated_at"]
    list_filter = ["model"]
    search_fields = ["agent", "description", "system_prompt"]
    list_select_related = ["updated_by"]
    readonly_fields = [
        "tools",
        "version",
        "versions",
        "created_by",
        "created_at",
        "updated_by",
        "updated_at",
    ]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        # The id is chosen once; runs name their agent by it.
        fields = list(super().get_readonly_fields(request, obj))
        if obj is not None and not self.has_change_permission(request, obj):
            fields.append("shown_mcp_servers")
        return [*fields, "agent"] if obj is not None else fields

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        fields = [f for f in super().get_fields(request, obj) if f != "shown_mcp_servers"]
        if obj is not None and not self.has_change_permission(request, obj):
            # Those who may only look see the servers as the API shows them to
            # non-editors: no env or header values, args, cwd or URL query.
            return ["shown_mcp_servers" if f == "mcp_servers" else f for f in fields]
        return fields

    @admin.display(description="MCP servers")
    def shown_mcp_servers(self, obj: AgentDefinition) -> str:
        shown = agent_services.redacted({"mcp_servers": obj.mcp_servers})
        return format_html("<pre>{}</pre>", json.dumps(shown["mcp_servers"], indent=2))

    def get_form(
        self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any
    ) -> Any:
        form = super().get_form(request, obj, change, **kwargs)
        # A form class per request: the user is the one who saves with it.
        return type(form.__name__, (form,), {"user": request.user})

    @admin.display(description="Tools")
    def tools(self, obj: AgentDefinition) -> str:
        """The tools the agent is offered, MCP servers' as they list them now (a
        server that cannot be reached is said so, within its startup time)."""
        if not obj.pk:
            return "-"
        try:
            agent = Agent.from_dict(obj.as_definition())
        except ConfigError as exc:
            return str(exc)
        unavailable: dict[str, str] = {}
        rt.agents.start_mcp_servers([agent])
        tools = rt.agents.tools_of(agent, unavailable=unavailable, within=LISTING_SECONDS)
        rows = format_html_join(
            "",
            "<li><code>{}</code> ({}{}): {}<pre>{}</pre></li>",
            (
                (
                    tool.name,
                    tool.toolset,
                    ", needs approval"
                    if agent.policy.needs_approval(tool.name, tool.requires_approval)
                    else "",
                    tool.description,
                    json.dumps(tool.json_schema(), indent=2),
                )
                for tool in sorted(tools.values(), key=lambda t: t.name)
            ),
        )
        notes = format_html_join(
            "", "<li><strong>{}</strong>: {}</li>", sorted(unavailable.items())
        )
        return format_html("<ul>{}</ul><ul>{}</ul>", rows, notes)

    @admin.display(description="Versions")
    def versions(self, obj: AgentDefinition) -> str:
        url = reverse("admin:runs_app_agentversion_changelist") + f"?agent={obj.agent}"
        return format_html('<a href="{}">{} versions</a>', url, obj.version)

    def save_model(
        self, request: HttpRequest, obj: AgentDefinition, form: Any, change: bool
    ) -> None:
        # Saved through the one service that numbers versions (the API's too).
        changes = {name: getattr(obj, name) for name in agent_services.EDITABLE_FIELDS}
        saved = agent_services.agent_save(obj.agent, changes, by=request.user.pk)
        obj.pk, obj.version = saved.pk, saved.version
        obj.created_by_id, obj.updated_by_id = saved.created_by_id, saved.updated_by_id


@admin.register(AgentVersion)
class AgentVersionAdmin(ReadOnlyAdmin):
    list_display = ["agent", "number", "source", "created_by", "created_at"]
    list_filter = ["source"]
    search_fields = ["agent"]
    list_select_related = ["created_by"]
    fields = ["agent", "number", "source", "definition", "fingerprint", "created_by", "created_at"]

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        # Only those who may edit agents see their servers' declarations as written.
        if request.user.has_perm("runs_app.change_agentdefinition"):
            return list(self.fields)
        return ["shown_definition" if f == "definition" else f for f in self.fields]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [*super().get_readonly_fields(request, obj), "shown_definition"]

    @admin.display(description="Definition")
    def shown_definition(self, obj: AgentVersion) -> str:
        shown = agent_services.redacted(obj.definition)
        return format_html("<pre>{}</pre>", json.dumps(shown, indent=2))
