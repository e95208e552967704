"""Long-term memory: facts that outlive a conversation, and the history of each one."""

from __future__ import annotations

import uuid
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Q

from goaai.runtime.vocabulary import WRITER_KIND_CHOICES, MemoryScope, choices


class RevisionAction(models.TextChoices):
    CREATED = "created", "Created"
    UPDATED = "updated", "Updated"
    DELETED = "deleted", "Deleted"


# What each scope points at: exactly one owner field is set, and only the one the
# scope names (global entries point at nothing).
_SCOPE_OWNER = (
    Q(scope=MemoryScope.SESSION, session__isnull=False, user__isnull=True, agent="")
    | Q(scope=MemoryScope.USER, session__isnull=True, user__isnull=False, agent="")
    | Q(scope=MemoryScope.AGENT, session__isnull=True, user__isnull=True) & ~Q(agent="")
    | Q(scope=MemoryScope.GLOBAL, session__isnull=True, user__isnull=True, agent="")
)


class MemoryEntry(models.Model):
    """One remembered value, unique per (scope, owner, key)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    key = models.CharField(max_length=200)
    value = models.JSONField()
    scope = models.CharField(max_length=16, choices=choices(MemoryScope))
    # A session's memory goes with the session; a user's with the user.
    session = models.ForeignKey(
        "sessions_app.Session",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="memory_entries",
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="memory_entries",
    )
    agent = models.CharField(max_length=100, blank=True)
    # Incremented by every change; a writer that names a stale version is refused.
    version = models.PositiveIntegerField(default=1)
    written_by_kind = models.CharField(max_length=8, choices=WRITER_KIND_CHOICES)
    written_by_user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    written_by_run = models.ForeignKey(
        "runs_app.Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    written_by_tool_call = models.ForeignKey(
        "runs_app.ToolCall", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    expires_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "memory entries"
        ordering = ["key"]
        indexes = [
            models.Index(fields=["scope", "-updated_at"], name="memory_scope_updated"),
            models.Index(fields=["expires_at"], name="memory_expires"),
            # A run is told an owner's most recently updated facts when its message
            # matches none (goaai.sql.memory_ranked_rows): one index per scope,
            # read newest first, whatever the size of the owner's memory.
            models.Index(
                fields=["session", "-updated_at"],
                condition=Q(scope=MemoryScope.SESSION),
                name="memory_session_recent",
            ),
            models.Index(
                fields=["user", "-updated_at"],
                condition=Q(scope=MemoryScope.USER),
                name="memory_user_recent",
            ),
            models.Index(
                fields=["agent", "-updated_at"],
                condition=Q(scope=MemoryScope.AGENT),
                name="memory_agent_recent",
            ),
        ]
        constraints = [
            models.CheckConstraint(condition=_SCOPE_OWNER, name="memory_scope_owner_matches"),
            models.CheckConstraint(condition=Q(version__gte=1), name="memory_version_positive"),
            # One entry per (scope, owner, key). These partial unique indexes are also
            # the indexes that scope resolution reads through.
            models.UniqueConstraint(
                fields=["session", "key"],
                condition=Q(scope=MemoryScope.SESSION),
                name="memory_unique_session_key",
            ),
            models.UniqueConstraint(
                fields=["user", "key"],
                condition=Q(scope=MemoryScope.USER),
                name="memory_unique_user_key",
            ),
            models.UniqueConstraint(
                fields=["agent", "key"],
                condition=Q(scope=MemoryScope.AGENT),
                name="memory_unique_agent_key",
            ),
            models.UniqueConstraint(
                fields=["key"],
                condition=Q(scope=MemoryScope.GLOBAL),
                name="memory_unique_global_key",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.scope}:{self.key}"


class EmbeddingField(models.Field):  # type: ignore[type-arg]
    """A vector of floats, as the vector search of each database reads it: a
    ``real[]`` on PostgreSQL (compared by pgvector, cast to its ``vector``, where
    the extension is installed), little-endian float32s in a BLOB on SQLite (compared
    by sqlite-vec). Written and read only through :mod:`goaai.sql`."""

    description = "A vector of floats"

    def db_type(self, connection: Any) -> str:
        return "real[]" if connection.vendor == "postgresql" else "blob"


class MemoryEmbedding(models.Model):
    """The embedding of one entry's text (its key and value) by one model, written
    with the entry by :mod:`memory_app.services` when embeddings are configured.

    The database deletes it with its entry (its foreign key cascades there, so that
    set-based deletes of entries take their vectors along; Django's collector leaves
    it alone), and a changed entry's vector is replaced in the same transaction."""

    entry = models.OneToOneField(
        MemoryEntry,
        primary_key=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        related_name="+",
    )
    # The embedder's name, "<profile>:<model>": vectors of other models are ignored.
    model = models.CharField(max_length=200)
    vector = EmbeddingField()

    def __str__(self) -> str:
        return f"{self.model} embedding of {self.entry_id}"


class MemoryRevision(models.Model):
    """One change of a memory entry, kept for audit even after the entry is deleted.

    ``entry`` keeps the id of the entry without a database constraint, so that the
    history of a deleted entry stays readable. The revision also carries the
    entry's owner, so that deleting a session or a user removes the history of their
    memory along with it.
    """

    id = models.BigAutoField(primary_key=True)
    entry = models.ForeignKey(
        MemoryEntry,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        related_name="revisions",
    )
    key = models.CharField(max_length=200)
    scope = models.CharField(max_length=16, choices=choices(MemoryScope))
    session = models.ForeignKey(
        "sessions_app.Session",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="memory_revisions",
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="memory_revisions",
    )
    agent = models.CharField(max_length=100, blank=True)
    version = models.PositiveIntegerField()
    value = models.JSONField(null=True, blank=True)
    action = models.CharField(max_length=8, choices=RevisionAction.choices)
    actor_kind = models.CharField(max_length=8, choices=WRITER_KIND_CHOICES)
    actor_user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    actor_run = models.ForeignKey(
        "runs_app.Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor_tool_call = models.ForeignKey(
        "runs_app.ToolCall", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["entry", "version"]
        indexes = [
            models.Index(fields=["-created_at"], name="memoryrev_created"),
        ]
        constraints = [
            # A deletion is recorded as the version after the last write.
            models.UniqueConstraint(
                fields=["entry", "version"], name="memoryrev_unique_entry_version"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.scope}:{self.key} v{self.version} {self.action}"
