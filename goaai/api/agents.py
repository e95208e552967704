"""The agents goaai can run, with their tools and policies."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from goaai.runtime import rt
from goaai.runtime.agents import Agent


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


class AgentSerializer(serializers.Serializer):  # type: ignore[type-arg]
    id = serializers.CharField()
    description = serializers.CharField()
    model = serializers.CharField()
    toolsets = serializers.ListField(child=serializers.CharField())
    delegates = serializers.ListField(
        child=serializers.CharField(), help_text="Agents it may call as tools."
    )
    tools = ToolSerializer(many=True)
    policy = serializers.DictField(help_text="Caps: turns, tool calls, failures, time.")


class AgentListSerializer(serializers.Serializer):  # type: ignore[type-arg]
    next = serializers.URLField(allow_null=True)
    previous = serializers.URLField(allow_null=True)
    results = AgentSerializer(many=True)


def describe(agent: Agent) -> dict[str, Any]:
    tools = rt.agents.tools_of(agent)
    return {
        "id": agent.id,
        "description": agent.description,
        "model": agent.model,
        "toolsets": list(agent.toolsets),
        "delegates": list(agent.delegates),
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
        "policy": agent.policy.as_dict(),
    }


class AgentListView(APIView):
    permission_classes = [IsAuthenticated]

    @extend_schema(
        summary="List agents",
        description="Every agent a session can talk to, with its tools (argument "
        "schemas, approval) and its policy. Label rules may tighten a run's policy.",
        responses={200: AgentListSerializer},
    )
    def get(self, request: Request) -> Response:
        results = [describe(agent) for agent in rt.agents.all()]
        return Response({"next": None, "previous": None, "results": results})
