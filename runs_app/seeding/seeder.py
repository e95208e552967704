"""The whole data set: the demo users, then the plan's sessions, a chunk of them per
transaction."""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from goaai.runtime import rt
from runs_app import rollups
from runs_app.seeding.outcomes import Outcomes
from runs_app.seeding.plan import AgentTools, Odds, Plan, SessionShape
from runs_app.seeding.runs import RunWriter
from runs_app.seeding.sessions import SessionWriter
from runs_app.seeding.tables import Ids, Tables


class Seeder:
    """Generates the rows of ``plan`` and writes them, a chunk of sessions per
    transaction. ``seed`` fixes the content; ids are always fresh, so seeding twice
    adds to what is there."""

    def __init__(self, plan: Plan, *, seed: int, now: dt.datetime | None = None) -> None:
        self.plan = plan
        rng = random.Random(seed)  # noqa: S311 (made-up data, not secrets)
        registry = rt.agents
        self.odds = Odds(plan, AgentTools(registry, memory=plan.memory), rng)
        self.tables = Tables()
        ids = Ids()
        runs = RunWriter(
            tables=self.tables,
            odds=self.odds,
            outcomes=Outcomes(registry, rng),
            ids=ids,
            registry=registry,
            policy_for=lambda agent, labels: rt.policy_for(registry.get(agent), labels),
        )
        self.runs = runs
        self.sessions = SessionWriter(
            plan=plan,
            tables=self.tables,
            odds=self.odds,
            ids=ids,
            runs=runs,
            now=now or timezone.now(),
        )

    def run(self, progress: Callable[[int, int], None] | None = None) -> dict[str, int]:
        """Seed the plan; returns how many rows each model was given, by model name."""
        owners = self._owners()
        total, done = self.plan.sessions, 0
        while done < total:
            size = min(self.plan.sessions_per_transaction, total - done)
            with transaction.atomic():
                for number in range(done, done + size):
                    # Sessions start in order over the past days, as if recorded live:
                    # rows are stored in about the order of their times, as they are
                    # on a real database.
                    position = (number + self.odds.rng.random()) / total
                    owner = self.odds.rng.choice(owners)
                    self.sessions.write(self.odds.session(), owner_id=owner, position=position)
                self.tables.flush()
            done += size
            if progress is not None:
                progress(done, total)
        self._count()
        return self.tables.counts

    def session(self, shape: SessionShape, *, owner_id: int, position: float = 1.0) -> None:
        """Seed one session of ``shape`` now (the most recent, by default)."""
        with transaction.atomic():
            self.sessions.write(shape, owner_id=owner_id, position=position)
            self.tables.flush()
        self._count()

    def _count(self) -> None:
        """The dashboard's rollups of the days the runs were written in, counted
        again (the rows went in without the services that keep them)."""
        if self.runs.created is not None:
            rollups.recount(*self.runs.created)

    def _owners(self) -> list[int]:
        user_model = get_user_model()
        owners = []
        for number in range(1, self.plan.users + 1):
            user, created = user_model.objects.get_or_create(
                username=f"demo-user-{number}",
                defaults={"email": f"demo-user-{number}@example.com"},
            )
            if created:
                user.set_unusable_password()
                user.save(update_fields=["password"])
            owners.append(user.pk)
        return owners
