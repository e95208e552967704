"""Runs, the turns inside them, and the tool calls inside turns.

These rows are the audit record of what an agent did. They are written only by
``runs_app.services`` and are never edited by hand (the admin shows them read-only).
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models

from goaai.runtime.vocabulary import (
    ErrorKind,
    RunStatus,
    ToolCallStatus,
    choices,
)

ERROR_KIND_CHOICES = choices(ErrorKind)
# What a person decided about a tool call that asked them.
DECISION_CHOICES = [("approved", "Approved"), ("denied", "Denied"), ("answered", "Answered")]


class Run(models.Model):
    """One execution of an agent, started by one user message."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    session = models.ForeignKey(
        "sessions_app.Session", on_delete=models.CASCADE, related_name="runs"
    )
    agent = models.CharField(max_length=100)
    input = models.TextField()
    output = models.TextField(blank=True)
    status = models.CharField(max_length=20, choices=choices(RunStatus), default=RunStatus.PENDING)
    labels = models.JSONField(default=dict, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    # The policy in force for this run (caps after label rules), kept for audit.
    policy = models.JSONField(default=dict, blank=True)
    # An agent called as a tool by another agent runs as a child run. Deleting a
    # parent run on its own leaves its children as the record of what they did.
    parent_run = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="child_runs"
    )
    parent_tool_call = models.ForeignKey(
        "ToolCall", null=True, blank=True, on_delete=models.SET_NULL, related_name="child_runs"
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    input_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    total_tokens = models.BigIntegerField(default=0)
    error_kind = models.CharField(max_length=32, choices=ERROR_KIND_CHOICES, blank=True)
    error_message = models.TextField(blank=True)
    error_retryable = models.BooleanField(default=False)
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    cancel_reason = models.CharField(max_length=200, blank=True)
    # What an ``awaiting_input`` run waits for: {"kind": "approval"|"question",
    # "tool_call": id, "question": text}; null otherwise.
    awaiting = models.JSONField(null=True, blank=True)
    awaiting_since = models.DateTimeField(null=True, blank=True)
    # Time spent waiting for people, which the policy's time budget does not count.
    paused_seconds = models.FloatField(default=0)
    # The worker executing the run holds a lease it keeps renewing; a run whose
    # lease expired lost its worker and is taken up again by another.
    lease_owner = models.CharField(max_length=200, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    # When the run was last put on the distributed queue (the Celery executor). A
    # run that has not changed since is not queued again within a lease period:
    # servers and workers looking for lost runs would otherwise pile up copies of
    # every run still waiting for a free worker.
    queued_at = models.DateTimeField(null=True, blank=True)
    # Idempotent creation: the same key on the same session returns the same run;
    # the fingerprint of the request body tells a replay from a conflicting reuse.
    # NULL (not "") when absent, so the unique constraint ignores keyless runs.
    idempotency_key = models.CharField(max_length=200, null=True, blank=True)  # noqa: DJ001
    request_fingerprint = models.CharField(max_length=64, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at"]
        # Actions on another user's run (see goaai.access); a user may always act
        # on their own.
        permissions = [
            ("cancel_run", "Can cancel any user's run"),
            ("respond_run", "Can approve, deny or answer for any user's run"),
        ]
        indexes = [
            models.Index(fields=["session", "created_at"], name="run_session_created"),
            models.Index(fields=["status", "-created_at"], name="run_status_created"),
            # The admin's most common audit filter: one agent's runs in one status.
            models.Index(
                fields=["status", "agent", "-created_at"], name="run_status_agent_created"
            ),
            models.Index(fields=["agent", "-created_at"], name="run_agent_created"),
            models.Index(fields=["-created_at"], name="run_created"),
            models.Index(fields=["status", "lease_expires_at"], name="run_status_lease"),
        ]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(status__in=[s.value for s in RunStatus]),
                name="run_status_valid",
            ),
            models.CheckConstraint(
                condition=models.Q(input_tokens__gte=0, output_tokens__gte=0, total_tokens__gte=0),
                name="run_usage_non_negative",
            ),
            models.UniqueConstraint(
                fields=["session", "idempotency_key"],
                condition=models.Q(idempotency_key__isnull=False),
                name="run_idempotency_key_unique",
            ),
        ]

    def __str__(self) -> str:
        return f"Run {self.id} ({self.status})"

    @property
    def is_terminal(self) -> bool:
        return RunStatus(self.status).is_terminal

    @property
    def duration_ms(self) -> int | None:
        if self.started_at is None or self.ended_at is None:
            return None
        return int((self.ended_at - self.started_at).total_seconds() * 1000)


class Turn(models.Model):
    """One model round-trip inside a run."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="turns")
    index = models.PositiveIntegerField()
    model = models.CharField(max_length=200, blank=True)
    request_messages = models.JSONField(default=list, blank=True)
    response_text = models.TextField(blank=True)
    response_tool_calls = models.JSONField(default=list, blank=True)
    input_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    latency_ms = models.PositiveIntegerField(null=True, blank=True)
    started_at = models.DateTimeField(auto_now_add=True)
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["run", "index"]
        constraints = [
            models.UniqueConstraint(fields=["run", "index"], name="turn_index_unique_per_run"),
        ]

    def __str__(self) -> str:
        return f"Turn {self.index} of run {self.run_id}"


class ToolCall(models.Model):
    """One call of a tool that a model asked for in a turn."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="tool_calls")
    turn = models.ForeignKey(Turn, on_delete=models.CASCADE, related_name="tool_calls")
    # Denormalised from the run so that audits by session need no join on big tables.
    session = models.ForeignKey(
        "sessions_app.Session", on_delete=models.CASCADE, related_name="tool_calls"
    )
    # The id the model gave the call; its result is sent back under this id.
    call_id = models.CharField(max_length=200, blank=True)
    index = models.PositiveIntegerField(default=0)
    name = models.CharField(max_length=100)
    arguments = models.JSONField(default=dict, blank=True)
    result = models.JSONField(null=True, blank=True)
    status = models.CharField(
        max_length=20, choices=choices(ToolCallStatus), default=ToolCallStatus.SCHEDULED
    )
    error_kind = models.CharField(max_length=32, choices=ERROR_KIND_CHOICES, blank=True)
    error_message = models.TextField(blank=True)
    requires_approval = models.BooleanField(default=False)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    decision = models.CharField(max_length=16, choices=DECISION_CHOICES, blank=True)
    decision_reason = models.TextField(blank=True)
    # How many times execution of the call began (a resumed run may retry an
    # idempotent tool whose worker died mid-call).
    attempt = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    duration_ms = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["created_at", "index"]
        indexes = [
            models.Index(fields=["run", "created_at"], name="toolcall_run_created"),
            models.Index(fields=["session", "-created_at"], name="toolcall_session_created"),
            models.Index(fields=["name", "-created_at"], name="toolcall_name_created"),
            models.Index(
                fields=["name", "status", "-created_at"], name="toolcall_name_status_created"
            ),
            models.Index(fields=["status", "-created_at"], name="toolcall_status_created"),
            models.Index(fields=["error_kind", "-created_at"], name="toolcall_error_created"),
            models.Index(fields=["-created_at"], name="toolcall_created"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["turn", "index"], name="toolcall_index_unique_per_turn"
            ),
            models.CheckConstraint(
                condition=models.Q(status__in=[s.value for s in ToolCallStatus]),
                name="toolcall_status_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.status})"
