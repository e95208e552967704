"""Runs, the turns inside them, and the tool calls inside turns.

These rows are the audit record of what an agent did. They are written only by
``runs_app.services`` and are never edited by hand (the admin shows them read-only).
"""

from __future__ import annotations

import uuid
from typing import Any

from django.conf import settings
from django.db import models

from goaai.runtime.vocabulary import (
    ErrorKind,
    FinishReason,
    Multitask,
    RunStatus,
    ScoreKind,
    ScoreSource,
    StopKind,
    ToolCallStatus,
    TurnInterruption,
    choices,
)

ERROR_KIND_CHOICES = choices(ErrorKind)
# What a person decided about a tool call that asked them.
DECISION_CHOICES = [("approved", "Approved"), ("denied", "Denied"), ("answered", "Answered")]


class AgentDefinition(models.Model):
    """An agent kept as data: created and edited by staff in the admin or the API,
    beside the agents declared in code. Each change is a new :class:`AgentVersion`;
    this row is the current one, ``version`` its number."""

    agent = models.CharField(max_length=100, unique=True, help_text="The agent's id.")
    description = models.TextField(blank=True)
    model = models.CharField(
        max_length=300, default="scripted", help_text="scripted or <profile>:<model>."
    )
    system_prompt = models.TextField(blank=True)
    toolsets = models.JSONField(default=list, blank=True)
    delegates = models.JSONField(default=list, blank=True, help_text="Agents it may call.")
    policy = models.JSONField(default=dict, blank=True)
    model_settings = models.JSONField(default=dict, blank=True)
    conversation = models.JSONField(
        default=dict,
        blank=True,
        help_text="Context budget, tool result size, memory shown, parallel calls, multitask.",
    )
    mcp_servers = models.JSONField(
        default=dict,
        blank=True,
        help_text="MCP servers of this agent, by name, in the shape MCP clients share "
        '({"time": {"command": "python", "args": ["-m", "mcp_server_time"]}}); its '
        "toolsets name them as mcp:<name>.",
    )
    version = models.PositiveIntegerField(default=0, editable=False)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["agent"]
        verbose_name = "agent"

    def __str__(self) -> str:
        return f"{self.agent} (version {self.version})"

    def as_definition(self) -> dict[str, Any]:
        """The agent as the runtime reads it (``Agent.from_dict``)."""
        return {
            "id": self.agent,
            "description": self.description,
            "model": self.model,
            "system_prompt": self.system_prompt,
            "toolsets": self.toolsets,
            "delegates": self.delegates,
            "policy": self.policy,
            "model_settings": self.model_settings,
            "conversation": self.conversation,
            "mcp_servers": self.mcp_servers,
        }


class AgentVersion(models.Model):
    """One version of an agent, as runs executed it; never changed once written.

    An agent in code gets a version the first time a run executes it as it is
    (``source`` code), an agent kept as data one at each change (``source`` data).
    """

    SOURCES = [("code", "Code"), ("data", "Admin or API")]

    agent = models.CharField(max_length=100)
    number = models.PositiveIntegerField()
    source = models.CharField(max_length=8, choices=SOURCES)
    definition = models.JSONField()
    fingerprint = models.CharField(max_length=64)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["agent", "-number"]
        constraints = [
            models.UniqueConstraint(fields=["agent", "number"], name="agentversion_unique_number"),
        ]
        indexes = [
            models.Index(fields=["agent", "fingerprint"], name="agentversion_fingerprint"),
        ]

    def __str__(self) -> str:
        return f"{self.agent} version {self.number}"


class Run(models.Model):
    """One execution of an agent, started by one user message."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    session = models.ForeignKey(
        "sessions_app.Session", on_delete=models.CASCADE, related_name="runs"
    )
    agent = models.CharField(max_length=100)
    # The version of the agent the run executes (audit: which prompt and settings
    # produced this answer), and its number.
    agent_version = models.ForeignKey(
        AgentVersion, null=True, blank=True, on_delete=models.PROTECT, related_name="runs"
    )
    agent_version_number = models.PositiveIntegerField(null=True, blank=True)
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
    # The conversation is a tree of top-level runs: each continues from the run
    # before it on its branch (``previous_run``), which is the history it sees. A
    # retry, a regenerated answer and an edited message start a new branch from the
    # same point, and say which run they redo; a fork's first run continues from a
    # run of the session it was forked from.
    previous_run = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="next_runs"
    )
    retry_of = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="retries"
    )
    regenerates = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="regenerations"
    )
    edit_of = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="edits"
    )
    # What a message sent while another run of the session was active did
    # (enqueue, reject, interrupt); blank when none was active.
    multitask = models.CharField(max_length=12, choices=choices(Multitask), blank=True)
    # The model that answered the run's latest turn ("<profile>:<model>"; empty before
    # its first): what the dashboard and the runs list filter and group runs by.
    model = models.CharField(max_length=200, blank=True)
    # The tokens of every turn, each kind apart (see goaai.runtime.types.Usage):
    # input at the full price, output, prompt cache reads and writes, and the part
    # of the output spent reasoning. total_tokens is input, cache and output.
    input_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    total_tokens = models.BigIntegerField(default=0)
    cached_input_tokens = models.BigIntegerField(default=0)
    cache_write_tokens = models.BigIntegerField(default=0)
    reasoning_tokens = models.BigIntegerField(default=0)
    # What the run's turns cost, in US dollars, by the prices in force when each
    # was recorded; turns of a model without a price add nothing here and are
    # counted in unpriced_turns.
    cost = models.DecimalField(max_digits=20, decimal_places=10, default=0)
    unpriced_turns = models.PositiveIntegerField(default=0)
    error_kind = models.CharField(max_length=32, choices=ERROR_KIND_CHOICES, blank=True)
    error_message = models.TextField(blank=True)
    error_retryable = models.BooleanField(default=False)
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    cancel_reason = models.CharField(max_length=200, blank=True)
    # Who asked for the stop and in which role, for telling the ending ("Stopped by
    # an operator (maria)"); blank on runs nobody stopped.
    cancel_kind = models.CharField(max_length=16, choices=choices(StopKind), blank=True)
    cancel_requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    # What an ``awaiting_input`` run waits for: {"kind": "approval"|"question",
    # "tool_call": id, "question": text}; null otherwise.
    awaiting = models.JSONField(null=True, blank=True)
    awaiting_since = models.DateTimeField(null=True, blank=True)
    # Time spent waiting for people, which the policy's time budget does not count.
    paused_seconds = models.FloatField(default=0)
    # The worker executing the run holds a lease it keeps renewing; a run whose
    # lease expired lost its worker and is taken up again by another. An owner
    # without an expiry is a worker known lost (its process ended, see
    # services.run_interrupt); no owner, a run released for the next worker.
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
    # What the caller gave the run beside its message, through the OpenAI-compatible
    # endpoint: tools it executes itself ({name, description, parameters}) and its
    # own instructions (its system messages). See goaai.runtime.tools.client.
    client_tools = models.JSONField(default=list, blank=True)
    instructions = models.TextField(blank=True)
    # A digest of the conversation an OpenAI-compatible client sent, up to and
    # including this run's message: a client that resends the whole conversation
    # is found again in this run's session (runs_app.openai_api.conversation).
    conversation_digest = models.CharField(max_length=64, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    # Not a column: set on a top-level run by the step that ends it, the session's
    # run whose turn has come with that end (``None``: none waits), read in the
    # same transaction, so that the executor hands it over without reading again.
    next_queued_id: uuid.UUID | None

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
            # A session's open runs (the queue a new message joins): read under the
            # session's lock by every message, however many runs it has ended.
            models.Index(fields=["session", "status"], name="run_session_status"),
            models.Index(fields=["status", "-created_at"], name="run_status_created"),
            # The admin's most common audit filter: one agent's runs in one status.
            models.Index(
                fields=["status", "agent", "-created_at"], name="run_status_agent_created"
            ),
            models.Index(fields=["agent", "-created_at"], name="run_agent_created"),
            models.Index(fields=["-created_at"], name="run_created"),
            models.Index(fields=["status", "lease_expires_at"], name="run_status_lease"),
            # The dashboard's runs waiting longest, among those waiting now only.
            models.Index(
                fields=["awaiting_since"],
                name="run_awaiting_since",
                condition=models.Q(status="awaiting_input"),
            ),
            # Only runs started through the OpenAI-compatible endpoint have a digest.
            models.Index(
                fields=["conversation_digest", "-created_at"],
                name="run_conversation_digest",
                condition=~models.Q(conversation_digest=""),
            ),
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
    # The model asked, as the agent names it ("<profile>:<model>"), and the model
    # that answered, as the provider names it (often a dated version).
    model = models.CharField(max_length=200, blank=True)
    response_model = models.CharField(max_length=200, blank=True)
    request_messages = models.JSONField(default=list, blank=True)
    response_text = models.TextField(blank=True)
    response_tool_calls = models.JSONField(default=list, blank=True)
    # Why the model stopped; "length" is a reply cut off by the output limit.
    finish_reason = models.CharField(max_length=20, choices=choices(FinishReason), blank=True)
    # The thinking the model showed, and the provider's own reasoning items that
    # go back to it with the conversation (signed thinking blocks).
    reasoning = models.TextField(blank=True)
    reasoning_state = models.JSONField(default=list, blank=True)
    input_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    cached_input_tokens = models.BigIntegerField(default=0)
    cache_write_tokens = models.BigIntegerField(default=0)
    reasoning_tokens = models.BigIntegerField(default=0)
    # In US dollars, by the price in force when the turn was recorded; null when
    # the model has no price.
    cost = models.DecimalField(max_digits=20, decimal_places=10, null=True, blank=True)
    # How many times the model was asked again after a retryable error, and what
    # each failed attempt's provider said ({attempt, error_kind, message, at}): the
    # provider's own words are for operators (the turn's events tell its owner the
    # kind in plain words).
    retries = models.PositiveIntegerField(default=0)
    retry_errors = models.JSONField(default=list, blank=True)
    latency_ms = models.PositiveIntegerField(null=True, blank=True)
    # A turn that did not finish (stopped, failed or crashed mid-answer) keeps the
    # text streamed so far in ``response_text``; while it streams, that text is
    # checkpointed about once a second. Its usage is the provider's when it reported
    # it, else estimated from the text (``usage_estimated``).
    interruption = models.CharField(max_length=16, choices=choices(TurnInterruption), blank=True)
    usage_estimated = models.BooleanField(default=False)
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


class ModelPrice(models.Model):
    """What a model of a profile costs, in US dollars per million tokens of each
    kind, from a moment on. A turn's cost is computed with the price in force when
    it is recorded and stored with it: a later price changes no history."""

    profile = models.CharField(max_length=64, help_text="The model profile, e.g. openai.")
    model = models.CharField(
        max_length=200, help_text="The model as agents name it after the profile, e.g. gpt-4.1."
    )
    effective_from = models.DateTimeField(help_text="Turns recorded from this moment on.")
    input_per_million = models.DecimalField(max_digits=12, decimal_places=6)
    output_per_million = models.DecimalField(max_digits=12, decimal_places=6)
    cached_input_per_million = models.DecimalField(
        max_digits=12,
        decimal_places=6,
        null=True,
        blank=True,
        help_text="Prompt tokens read from the cache; blank: the input price.",
    )
    cache_write_per_million = models.DecimalField(
        max_digits=12,
        decimal_places=6,
        null=True,
        blank=True,
        help_text="Prompt tokens written to the cache; blank: the input price.",
    )
    reasoning_per_million = models.DecimalField(
        max_digits=12,
        decimal_places=6,
        null=True,
        blank=True,
        help_text="Output tokens spent reasoning; blank: the output price.",
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["profile", "model", "-effective_from"]
        constraints = [
            models.UniqueConstraint(
                fields=["profile", "model", "effective_from"], name="modelprice_unique_start"
            ),
            models.CheckConstraint(
                condition=models.Q(input_per_million__gte=0, output_per_million__gte=0)
                & (
                    models.Q(cached_input_per_million__isnull=True)
                    | models.Q(cached_input_per_million__gte=0)
                )
                & (
                    models.Q(cache_write_per_million__isnull=True)
                    | models.Q(cache_write_per_million__gte=0)
                )
                & (
                    models.Q(reasoning_per_million__isnull=True)
                    | models.Q(reasoning_per_million__gte=0)
                ),
                name="modelprice_non_negative",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.profile}:{self.model} from {self.effective_from:%Y-%m-%d}"


class HistorySummary(models.Model):
    """What the agent's model wrote to stand for the earlier part of a conversation,
    so that a long session stays within its context budget.

    It covers the branch up to and including ``through_run`` (folding in the summary
    before it, ``previous``), and is reused by every later run on that branch until
    the runs after it no longer fit; then a new one folds them in. ``run`` is the run
    that asked for it, and pays for it: its usage and cost are the run's too.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    session = models.ForeignKey(
        "sessions_app.Session", on_delete=models.CASCADE, related_name="history_summaries"
    )
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="summaries_written")
    through_run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="summaries")
    previous = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    runs_covered = models.PositiveIntegerField(default=0)
    text = models.TextField()
    model = models.CharField(max_length=200, blank=True)
    input_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    cost = models.DecimalField(max_digits=20, decimal_places=10, null=True, blank=True)
    latency_ms = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name_plural = "history summaries"
        indexes = [
            models.Index(fields=["through_run", "-created_at"], name="summary_through_created"),
        ]

    def __str__(self) -> str:
        return f"Summary through run {self.through_run_id}"


class SessionFork(models.Model):
    """A session started from a point of another: its history is the other's branch
    up to and including ``source_run``, which its first run continues from."""

    session = models.OneToOneField(
        "sessions_app.Session", on_delete=models.CASCADE, related_name="fork"
    )
    source_session = models.ForeignKey(
        "sessions_app.Session",
        null=True,
        on_delete=models.SET_NULL,
        related_name="forks",
    )
    source_run = models.ForeignKey(Run, null=True, on_delete=models.SET_NULL, related_name="forks")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.session_id} forked from {self.source_session_id}"


class Score(models.Model):
    """A judgement of a run: a user's thumbs up or down, a reviewer's grade, an
    evaluation's metric. Numeric and boolean scores keep ``value`` (a boolean is 1
    or 0); category scores keep ``category``."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="scores")
    # What is scored: "feedback" for the user's thumbs, any name for the others.
    name = models.CharField(max_length=100)
    kind = models.CharField(max_length=16, choices=choices(ScoreKind))
    value = models.FloatField(null=True, blank=True)
    category = models.CharField(max_length=100, blank=True)
    source = models.CharField(max_length=16, choices=choices(ScoreSource))
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="run_scores",
    )
    comment = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["run", "name"], name="score_run_name"),
            models.Index(fields=["name", "-created_at"], name="score_name_created"),
        ]
        constraints = [
            # One thumbs per person and run: giving another replaces it.
            models.UniqueConstraint(
                fields=["run", "name", "author"],
                condition=models.Q(source=ScoreSource.FEEDBACK),
                name="score_feedback_once_per_author",
            ),
            models.CheckConstraint(
                condition=models.Q(kind__in=[k.value for k in ScoreKind]),
                name="score_kind_valid",
            ),
        ]

    def __str__(self) -> str:
        shown = self.category if self.kind == ScoreKind.CATEGORY else self.value
        return f"{self.name}={shown} on run {self.run_id}"


class RollupSpan(models.TextChoices):
    HOUR = "hour", "Hour"
    DAY = "day", "Day"


class RunRollup(models.Model):
    """What the runs created in one hour (or one day, in UTC) by one owner with one
    agent and answering model, that ended in one status, add up to. Written by
    ``runs_app.rollups`` in the transaction that ends each run, so the operators'
    dashboard sums a few rows per period instead of scanning the runs."""

    span = models.CharField(max_length=4, choices=RollupSpan.choices)
    period = models.DateTimeField(help_text="The hour or UTC day the runs were created in.")
    agent = models.CharField(max_length=100)
    model = models.CharField(max_length=200, blank=True)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    status = models.CharField(max_length=20, choices=choices(RunStatus))
    runs = models.BigIntegerField(default=0)
    input_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    cached_input_tokens = models.BigIntegerField(default=0)
    cache_write_tokens = models.BigIntegerField(default=0)
    reasoning_tokens = models.BigIntegerField(default=0)
    total_tokens = models.BigIntegerField(default=0)
    cost = models.DecimalField(max_digits=24, decimal_places=10, default=0)
    unpriced_turns = models.BigIntegerField(default=0)
    # Runs that started (those that have a duration), and their durations in ms:
    # from start to end, and the same less the time spent waiting for people.
    timed_runs = models.BigIntegerField(default=0)
    duration_ms = models.BigIntegerField(default=0)
    working_ms = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["span", "period", "agent", "model", "owner", "status"],
                name="runrollup_key",
            )
        ]
        indexes = [models.Index(fields=["span", "period"], name="runrollup_span_period")]

    def __str__(self) -> str:
        return f"{self.runs} {self.status} runs of {self.agent} ({self.span} {self.period})"


class LatencyCounts(models.Model):
    """How many runs of one period, agent and answering model took a time in one
    bucket (``bucket`` ``b`` holds ``1.1**b <= ms < 1.1**(b+1)``; 0 below 1.1 ms):
    the histograms the dashboard's percentiles are read from."""

    class Measure(models.TextChoices):
        DURATION = "duration", "From start to end"
        WORKING = "working", "Working (waits for people left out)"

    span = models.CharField(max_length=4, choices=RollupSpan.choices)
    period = models.DateTimeField()
    agent = models.CharField(max_length=100)
    model = models.CharField(max_length=200, blank=True)
    measure = models.CharField(max_length=8, choices=Measure.choices)
    bucket = models.PositiveSmallIntegerField()
    runs = models.BigIntegerField(default=0)

    class Meta:
        abstract = True

    def __str__(self) -> str:
        return f"{self.runs} runs in bucket {self.bucket} ({self.measure})"


class LatencyRollup(LatencyCounts):
    """The histograms of every user's runs together: what the dashboard reads unless
    it is filtered to one user (a tenth of the rows of :class:`UserLatencyRollup`
    with ten users, whose buckets fill up as runs grow)."""

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["span", "period", "agent", "model", "measure", "bucket"],
                name="latencyrollup_key",
            )
        ]


class UserLatencyRollup(LatencyCounts):
    """The same histograms, of each user's runs apart (the dashboard filtered to one
    user)."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["span", "period", "agent", "model", "owner", "measure", "bucket"],
                name="userlatencyrollup_key",
            )
        ]
        indexes = [models.Index(fields=["owner", "span", "period"], name="userlatencyrollup_owner")]


class ToolRollup(models.Model):
    """How the tool calls of the runs of one period, owner, agent and answering
    model ended, by tool, status and error kind (counted as each run ends)."""

    span = models.CharField(max_length=4, choices=RollupSpan.choices)
    period = models.DateTimeField()
    agent = models.CharField(max_length=100)
    model = models.CharField(max_length=200, blank=True)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    tool = models.CharField(max_length=100)
    status = models.CharField(max_length=20, choices=choices(ToolCallStatus))
    error_kind = models.CharField(max_length=32, choices=ERROR_KIND_CHOICES, blank=True)
    calls = models.BigIntegerField(default=0)
    duration_ms = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=[
                    "span",
                    "period",
                    "agent",
                    "model",
                    "owner",
                    "tool",
                    "status",
                    "error_kind",
                ],
                name="toolrollup_key",
            )
        ]
        indexes = [models.Index(fields=["span", "period"], name="toolrollup_span_period")]

    def __str__(self) -> str:
        return f"{self.calls} {self.tool} calls {self.status}"
