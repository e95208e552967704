"""Policies: the caps a run works within, and the label rules that tighten them.

The seed says labels are "for policies": settings hold rules such as "runs
labelled tier=free get at most 3 tool calls". When a run is created, every rule
whose labels match tightens the agent's policy, the result is stored on the run as
the policy in force, and each rule that fired is recorded as a ``policy.decision``.
Rules only ever tighten: a cap can go down, never up.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

# In ``approval_required``, this stands for every tool.
ALL_TOOLS = "*"


@dataclass(frozen=True)
class Policy:
    max_turns: int = 8
    max_tool_calls: int = 16
    max_consecutive_tool_failures: int = 3
    time_budget_seconds: float = 300.0
    # Tool names that wait for a person's approval before they run ("*": all).
    approval_required: frozenset[str] = frozenset()
    # Toolsets and tools the run may not use at all.
    blocked_toolsets: frozenset[str] = frozenset()
    blocked_tools: frozenset[str] = frozenset()

    def needs_approval(self, tool_name: str, tool_default: bool) -> bool:
        return (
            tool_default
            or ALL_TOOLS in self.approval_required
            or (tool_name in self.approval_required)
        )

    def allows(self, tool_name: str, toolset: str) -> bool:
        return tool_name not in self.blocked_tools and toolset not in self.blocked_toolsets

    def as_dict(self) -> dict[str, Any]:
        # Its fields are numbers and sets of names: read as they are, not copied deep
        # as dataclasses.asdict copies (a run's start asks for it).
        data = {name: getattr(self, name) for name in self.__dataclass_fields__}
        for name in ("approval_required", "blocked_toolsets", "blocked_tools"):
            data[name] = sorted(data[name])
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Policy:
        known = set(cls.__dataclass_fields__)
        values = {k: v for k, v in data.items() if k in known}
        for name in ("approval_required", "blocked_toolsets", "blocked_tools"):
            if name in values:
                values[name] = frozenset(values[name])
        return cls(**values)


@dataclass(frozen=True)
class LabelRule:
    """Tighten the policy of runs whose labels include every pair in ``match``."""

    name: str
    match: dict[str, str]
    max_turns: int | None = None
    max_tool_calls: int | None = None
    max_consecutive_tool_failures: int | None = None
    time_budget_seconds: float | None = None
    approval_required: frozenset[str] = field(default_factory=frozenset)
    blocked_toolsets: frozenset[str] = field(default_factory=frozenset)
    blocked_tools: frozenset[str] = field(default_factory=frozenset)

    def matches(self, labels: dict[str, str]) -> bool:
        return all(labels.get(key) == value for key, value in self.match.items())

    def apply(self, policy: Policy) -> Policy:
        def lower(current: Any, cap: Any) -> Any:
            return current if cap is None else min(current, cap)

        return replace(
            policy,
            max_turns=lower(policy.max_turns, self.max_turns),
            max_tool_calls=lower(policy.max_tool_calls, self.max_tool_calls),
            max_consecutive_tool_failures=lower(
                policy.max_consecutive_tool_failures, self.max_consecutive_tool_failures
            ),
            time_budget_seconds=lower(policy.time_budget_seconds, self.time_budget_seconds),
            approval_required=policy.approval_required | self.approval_required,
            blocked_toolsets=policy.blocked_toolsets | self.blocked_toolsets,
            blocked_tools=policy.blocked_tools | self.blocked_tools,
        )

    def describe(self) -> str:
        changes = [
            f"{name}={getattr(self, name)}"
            for name in (
                "max_turns",
                "max_tool_calls",
                "max_consecutive_tool_failures",
                "time_budget_seconds",
            )
            if getattr(self, name) is not None
        ]
        for name in ("approval_required", "blocked_toolsets", "blocked_tools"):
            if getattr(self, name):
                changes.append(f"{name}={','.join(sorted(getattr(self, name)))}")
        wanted = ", ".join(f"{k}={v}" for k, v in sorted(self.match.items()))
        return f"labels {wanted}: " + "; ".join(changes)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LabelRule:
        values = dict(data)
        for name in ("approval_required", "blocked_toolsets", "blocked_tools"):
            if name in values:
                values[name] = frozenset(values[name])
        values["match"] = {str(k): str(v) for k, v in dict(values["match"]).items()}
        return cls(**values)


@dataclass(frozen=True)
class Decision:
    rule: str
    verdict: str
    reason: str


def apply_label_rules(
    policy: Policy, labels: dict[str, str], rules: list[LabelRule]
) -> tuple[Policy, list[Decision]]:
    """The policy in force for a run with ``labels``, and the rules that fired."""
    decisions = []
    for rule in rules:
        if rule.matches(labels):
            policy = rule.apply(policy)
            decisions.append(Decision(rule=rule.name, verdict="tightened", reason=rule.describe()))
    return policy, decisions
