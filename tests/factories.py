"""factory_boy factories for every model."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import factory
from django.contrib.auth import get_user_model
from django.utils import timezone

from goaai.runtime.types import ModelReply, Usage
from goaai.runtime.vocabulary import MemoryScope, RunStatus, ToolCallStatus, WriterKind
from memory_app.models import MemoryEntry
from memory_app.services import memory_store
from runs_app import services
from runs_app.models import ModelPrice, Run, ToolCall, Turn
from sessions_app.models import Session


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"user{n}")
    email = factory.LazyAttribute(lambda u: f"{u.username}@example.com")
    password = factory.django.Password("correct horse battery staple")


class SessionFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Session

    owner = factory.SubFactory(UserFactory)
    agent = "assistant"
    title = factory.Sequence(lambda n: f"Conversation {n}")
    metadata = factory.LazyFunction(dict)


class RunFactory(factory.django.DjangoModelFactory):
    """A run in any status; the timestamps match the status it is given."""

    class Meta:
        model = Run

    session = factory.SubFactory(SessionFactory)
    agent = "assistant"
    input = "hello"
    status = RunStatus.PENDING
    started_at = factory.LazyAttribute(
        lambda run: None if run.status == RunStatus.PENDING else timezone.now()
    )
    ended_at = factory.LazyAttribute(
        lambda run: timezone.now() if RunStatus(run.status).is_terminal else None
    )


class TurnFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Turn

    run = factory.SubFactory(RunFactory)
    index = factory.Sequence(lambda n: n)
    model = "scripted"


class ToolCallFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = ToolCall

    turn = factory.SubFactory(TurnFactory)
    run = factory.SelfAttribute("turn.run")
    session = factory.SelfAttribute("turn.run.session")
    index = factory.Sequence(lambda n: n)
    name = "calculator"
    arguments = factory.LazyFunction(lambda: {"expression": "1+1"})
    status = ToolCallStatus.SUCCEEDED
    result = factory.LazyFunction(lambda: {"value": 2})


class ModelPriceFactory(factory.django.DjangoModelFactory):
    """A price in force since a day ago: $2 per million input tokens, $8 output."""

    class Meta:
        model = ModelPrice

    profile = "openai"
    model = "gpt-4.1"
    effective_from = factory.LazyFunction(lambda: timezone.now() - dt.timedelta(days=1))
    input_per_million = Decimal("2")
    output_per_million = Decimal("8")


def recorded_turn(
    run: Run,
    index: int,
    usage: Usage,
    *,
    model: str = "openai:gpt-4.1",
    response_model: str = "",
    **reply: Any,
) -> Turn:
    """A turn of ``run`` asking ``model`` (``<profile>:<model>``), started and
    answered as the turn loop records them: the services price it and add it to the
    run. ``response_model`` is the model the provider says answered; ``reply`` is
    the rest of the reply (``text``, ``finish_reason``, ``reasoning``…) and of
    ``turn_complete``'s arguments (``retries``, ``latency_ms``…)."""
    turn = services.turn_start(run_id=run.id, index=index, model=model, request_messages=[])
    recorded = {name: reply.pop(name) for name in ("retries", "latency_ms") if name in reply}
    recorded.setdefault("latency_ms", 10)
    reply.setdefault("text", f"answer {index}")
    services.turn_complete(
        turn_id=turn.id,
        reply=ModelReply(usage=usage, model=response_model, **reply),
        **recorded,
    )
    return Turn.objects.get(pk=turn.id)


class MemoryEntryFactory(factory.django.DjangoModelFactory):
    """A session-scoped entry; the traits ``user_scoped``, ``agent_scoped`` and
    ``global_scoped`` give the other scopes with the owner each one needs."""

    class Meta:
        model = MemoryEntry

    key = factory.Sequence(lambda n: f"fact {n}")
    value = "a value"
    scope = MemoryScope.SESSION
    session = factory.SubFactory(SessionFactory)
    user = None
    agent = ""
    written_by_kind = WriterKind.SYSTEM

    class Params:
        user_scoped = factory.Trait(
            scope=MemoryScope.USER, session=None, user=factory.SubFactory(UserFactory)
        )
        agent_scoped = factory.Trait(scope=MemoryScope.AGENT, session=None, agent="assistant")
        global_scoped = factory.Trait(scope=MemoryScope.GLOBAL, session=None)


def expired_memory(session, key: str, value: object = "green") -> MemoryEntry:
    """A session memory entry written as a run writes it, whose expiry has passed."""
    entry = memory_store(key=key, value=value, scope=MemoryScope.SESSION, session_id=session.id)
    MemoryEntry.objects.filter(pk=entry.pk).update(
        expires_at=timezone.now() - dt.timedelta(minutes=1)
    )
    return entry
