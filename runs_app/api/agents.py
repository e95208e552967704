"""The agents goaai can run, with their tools, policies and versions; staff create
and edit the agents kept as data (each change a new version)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

from drf_spectacular.utils import extend_schema
from drf_standardized_errors.openapi_validation_errors import extend_validation_errors
from rest_framework import exceptions, serializers, status
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from goaai.access import ADDITION, CHANGE, has_permission, log_actions
from goaai.runtime import rt
from goaai.runtime.agents import Agent
from goaai.runtime.config import ConfigError
from goaai.runtime.errors import UnknownAgent
from runs_app import agents as agent_services
from runs_app.models import AgentDefinition, AgentVersion


class ToolSerializer(serializers.Serializer):  # type: ignore[type-arg]
    name = serializers.CharField()
    description = serializers.CharField()
    toolset = serializers.CharField()
    parameters = serializers.DictField(help_text="JSON Schema of the tool's arguments.")
    needs_approval = serializers.BooleanField(
        help_text="Whether a person must approve each call (by the tool or the policy)."
    )
    idempotent = serializers.BooleanField()
    timeout_seconds = serializers.FloatField(allow_null=True)


class UnavailableToolsetSerializer(serializers.Serializer):  # type: ignore[type-arg]
    toolset = serializers.CharField()
    detail = serializers.CharField()


class AgentSerializer(serializers.Serializer):  # type: ignore[type-arg]
    id = serializers.CharField()
    description = serializers.CharField()
    model = serializers.CharField()
    system_prompt = serializers.CharField()
    toolsets = serializers.ListField(child=serializers.CharField())
    delegates = serializers.ListField(
        child=serializers.CharField(), help_text="Agents it may call as tools."
    )
    tools = ToolSerializer(many=True)
    policy = serializers.DictField(help_text="Caps: turns, tool calls, failures, time.")
    model_settings = serializers.DictField(
        help_text="temperature, max_output_tokens, reasoning_effort, timeout_seconds, "
        "retry_attempts, retry_seconds (null: the provider's default)."
    )
    conversation = serializers.DictField(
        help_text="context_tokens (null: the model's window), tool_result_chars, "
        "memory_tokens, parallel_tool_calls, multitask (enqueue, reject, interrupt)."
    )
    # A field named like DRF's own Field.source attribute, which the stubs type.
    source = serializers.ChoiceField(  # type: ignore[assignment]
        choices=["code", "data"], help_text="Declared in code, or kept as data (admin, API)."
    )
    version = serializers.IntegerField(
        allow_null=True, help_text="The current version of an agent kept as data."
    )
    mcp_servers = serializers.DictField(
        required=False,
        help_text="The agent's own MCP servers by name (command, args, env, cwd; or url, "
        "headers; trusted, timeout_seconds, startup_seconds, tools), env and header "
        "values hidden; to those who may not change agents, args, cwd and the URL's "
        "query hidden too. Present only when it declares some.",
    )
    unavailable_toolsets = UnavailableToolsetSerializer(
        many=True,
        help_text="Toolsets whose tools could not be listed now (an MCP server that does "
        "not start or answer), with what is wrong; a run needing one fails unavailable.",
    )


class AgentListSerializer(serializers.Serializer):  # type: ignore[type-arg]
    next = serializers.URLField(allow_null=True)
    previous = serializers.URLField(allow_null=True)
    results = AgentSerializer(many=True)


class AgentWriteSerializer(serializers.Serializer):  # type: ignore[type-arg]
    """An agent to create (``id`` required) or the fields to change."""

    id = serializers.CharField(max_length=100, required=False)
    description = serializers.CharField(allow_blank=True, required=False)
    model = serializers.CharField(max_length=300, required=False)
    system_prompt = serializers.CharField(allow_blank=True, required=False, trim_whitespace=False)
    toolsets = serializers.ListField(child=serializers.CharField(), required=False)
    delegates = serializers.ListField(child=serializers.CharField(), required=False)
    policy = serializers.DictField(required=False)
    model_settings = serializers.DictField(required=False)
    conversation = serializers.DictField(required=False)
    mcp_servers = serializers.DictField(
        required=False,
        help_text="MCP servers of the agent by name, named in its toolsets as mcp:<name>. "
        "Only a superuser may declare one goaai starts as a command.",
    )


class AgentVersionSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    created_by = serializers.IntegerField(source="created_by_id", allow_null=True)

    class Meta:
        model = AgentVersion
        fields = ["number", "source", "definition", "fingerprint", "created_by", "created_at"]

    def to_representation(self, instance: AgentVersion) -> dict[str, Any]:
        data: dict[str, Any] = super().to_representation(instance)
        editor = bool(self.context.get("editor"))
        data["definition"] = agent_services.redacted(data["definition"], editor=editor)
        return data


class AgentVersionListSerializer(serializers.Serializer):  # type: ignore[type-arg]
    next = serializers.URLField(allow_null=True)
    previous = serializers.URLField(allow_null=True)
    results = AgentVersionSerializer(many=True)


# The most a listing of agents waits for their MCP servers, all started at once: a
# server that is slower is noted as still starting, and one that failed to start
# is remembered for a while (see goaai.runtime.tools.mcp), so a down server slows
# neither this request past the budget nor the next ones.
LISTING_SECONDS = 5.0


def may_edit(request: Request) -> bool:
    """Whether the caller may edit agents, and so see their servers' declarations
    (args, cwd, URLs) as written."""
    return has_permission(request.user, AgentDefinition, "change")


def describe(
    agent: Agent, version: int | None = None, *, editor: bool = False, within: float | None = None
) -> dict[str, Any]:
    unavailable: dict[str, str] = {}
    if within is None:
        rt.agents.start_mcp_servers([agent])
        within = LISTING_SECONDS
    tools = rt.agents.tools_of(agent, unavailable=unavailable, within=within)
    return {
        **agent_services.redacted(agent.as_dict(), editor=editor),
        "unavailable_toolsets": [
            {"toolset": toolset, "detail": detail} for toolset, detail in unavailable.items()
        ],
        "tools": [
            {
                "name": tool.name,
                "description": tool.description,
                "toolset": tool.toolset,
                "parameters": tool.json_schema(),
                "needs_approval": agent.policy.needs_approval(tool.name, tool.requires_approval),
                "idempotent": tool.idempotent,
                "timeout_seconds": tool.timeout_seconds,
            }
            for tool in sorted(tools.values(), key=lambda t: t.name)
            if agent.policy.allows(tool.name, tool.toolset)
        ],
        "source": "code" if rt.agents.in_code(agent.id) else "data",
        "version": version,
    }


def _versions() -> dict[str, int]:
    return dict(AgentDefinition.objects.values_list("agent", "version"))


# "field: what is wrong" and "model_settings.temperature: ...", as ConfigError says.
_FIELD = re.compile(r"^(?:Agent '[^']*': )?([a-z_]+)(?:\.[a-z_]+)?: ")


def _invalid(exc: ConfigError) -> exceptions.ValidationError:
    message = str(exc)
    match = _FIELD.match(message)
    field = match.group(1) if match and match.group(1) in _FIELDS else "non_field_errors"
    if "No model client" in message:
        field = "model"
    elif "delegates to" in message:
        field = "delegates"
    return exceptions.ValidationError({field: [message]}, code="invalid_agent")


_FIELDS = {"id", *agent_services.EDITABLE_FIELDS}


def _write_data(request: Request) -> dict[str, Any]:
    body = AgentWriteSerializer(data=request.data)
    body.is_valid(raise_exception=True)
    return dict(body.validated_data)


# The codes of an agent refused as a whole (what is wrong is in the detail), by
# field; an id may also be taken, and an agent in code cannot be changed here.
def _agent_errors(method: str) -> Callable[[type[APIView]], type[APIView]]:
    def document(view: type[APIView]) -> type[APIView]:
        for field in sorted(_FIELDS | {"non_field_errors"}):
            codes = ["invalid_agent"]
            if field == "id":
                codes += ["agent_exists", "agent_in_code", "required", "invalid"]
            view = extend_validation_errors(codes, field_name=field, methods=[method])(view)
        return view

    return document


@_agent_errors("post")
class AgentListView(APIView):
    permission_classes = [IsAuthenticated]
    # Creating is for staff with the permission.
    forbidden_methods = ("post",)

    @extend_schema(
        operation_id="agents_list",
        summary="List agents",
        description="Every agent a session can talk to (declared in code, or kept as "
        "data), with its tools (argument schemas, approval), policy and model settings. "
        "Label rules may tighten a run's policy.",
        responses={200: AgentListSerializer},
    )
    def get(self, request: Request) -> Response:
        versions, editor = _versions(), may_edit(request)
        agents = rt.agents.all()
        rt.agents.start_mcp_servers(agents)
        deadline = time.monotonic() + LISTING_SECONDS
        results = [
            describe(
                agent,
                versions.get(agent.id),
                editor=editor,
                within=max(0.0, deadline - time.monotonic()),
            )
            for agent in agents
        ]
        return Response({"next": None, "previous": None, "results": results})

    @extend_schema(
        operation_id="agents_create",
        summary="Create an agent",
        description="Staff with the permission to add agents only. The agent is checked "
        "as goaai checks agents at start (its model's profile, toolsets, delegates, "
        "settings) and becomes version 1.",
        request=AgentWriteSerializer,
        responses={201: AgentSerializer},
    )
    def post(self, request: Request) -> Response:
        if not has_permission(request.user, AgentDefinition, "add"):
            raise exceptions.PermissionDenied("Only staff allowed to add agents may create one.")
        data = _write_data(request)
        agent_id = data.pop("id", None)
        if not agent_id:
            raise exceptions.ValidationError({"id": ["This field is required."]})
        if agent_id in rt.agents:
            raise exceptions.ValidationError(
                {"id": [f"An agent named {agent_id!r} exists."]}, code="agent_exists"
            )
        try:
            row = agent_services.agent_save(agent_id, data, by=request.user.pk)
        except ConfigError as exc:
            raise _invalid(exc) from None
        log_actions(request.user, [row], ADDITION, "Created (API)")
        return Response(
            describe(rt.agents.get(agent_id), row.version, editor=may_edit(request)),
            status=status.HTTP_201_CREATED,
        )


@_agent_errors("patch")
class AgentDetailView(APIView):
    permission_classes = [IsAuthenticated]
    # Changing is for staff with the permission.
    forbidden_methods = ("patch",)

    def _agent(self, agent_id: str) -> Agent:
        try:
            return rt.agents.get(agent_id)
        except UnknownAgent:
            raise exceptions.NotFound(f"No agent named {agent_id!r}.") from None

    @extend_schema(
        operation_id="agents_retrieve", summary="Show an agent", responses={200: AgentSerializer}
    )
    def get(self, request: Request, agent_id: str) -> Response:
        return Response(
            describe(self._agent(agent_id), _versions().get(agent_id), editor=may_edit(request))
        )

    @extend_schema(
        operation_id="agents_partial_update",
        summary="Change an agent",
        description="Staff with the permission to change agents only, and only agents "
        "kept as data (those in code change with the code). A change that alters the "
        "definition is a new version; runs already started keep theirs.",
        request=AgentWriteSerializer,
        responses={200: AgentSerializer},
    )
    def patch(self, request: Request, agent_id: str) -> Response:
        if not has_permission(request.user, AgentDefinition, "change"):
            raise exceptions.PermissionDenied("Only staff allowed to change agents may.")
        self._agent(agent_id)
        if rt.agents.in_code(agent_id):
            raise exceptions.ValidationError(
                {"id": [f"{agent_id!r} is defined in code; change it there."]},
                code="agent_in_code",
            )
        data = _write_data(request)
        if data.pop("id", agent_id) != agent_id:
            raise exceptions.ValidationError({"id": ["An agent's id cannot change."]})
        try:
            row = agent_services.agent_save(agent_id, data, by=request.user.pk)
        except ConfigError as exc:
            raise _invalid(exc) from None
        log_actions(request.user, [row], CHANGE, f"Changed (API): version {row.version}")
        return Response(describe(rt.agents.get(agent_id), row.version, editor=True))


class AgentVersionListView(APIView):
    permission_classes = [IsAuthenticated]

    @extend_schema(
        operation_id="agents_versions_list",
        summary="List an agent's versions",
        description="Every version runs executed or staff saved, newest first.",
        responses={200: AgentVersionListSerializer},
    )
    def get(self, request: Request, agent_id: str) -> Response:
        versions = AgentVersion.objects.filter(agent=agent_id).order_by("-number")
        if agent_id not in rt.agents and not versions.exists():
            raise exceptions.NotFound(f"No agent named {agent_id!r}.")
        results = AgentVersionSerializer(
            versions[:200], many=True, context={"editor": may_edit(request)}
        ).data
        return Response({"next": None, "previous": None, "results": results})
