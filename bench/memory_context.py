"""The memory part of a run's model input: choosing the facts a run is told (ranked
by its message, within the default budget of 1,000 tokens) and writing them as the
memory message, for a user with 10,000 facts against a user with 100.

    .venv/bin/python bench/memory_context.py [--db sqlite|postgres|both] [--calls N]

Both users' facts are made alike (keys of two words, values of three, drawn from the
same vocabulary of 2,000 made-up words) and live in the same database. Two kinds of
message are timed, in alternating rounds:

- a question about one of the user's facts ("what is my <key>?"): the full-text
  ranking finds it and the facts that share a word with it, and the budget is
  filled with the newest of the rest;
- a message that matches no fact ("hello there, how are you today"): the newest
  facts alone.

Target: 10,000 facts within 1.5x the time of 100 facts, for each kind.
"""

from __future__ import annotations

import random
import sys

from _common import arguments, median, per_call, run_each_database, setup_django, summary

SIZES = (100, 10_000)
VOCABULARY = 2_000
SYLLABLES = (
    "ka",
    "lo",
    "mi",
    "ne",
    "ru",
    "ta",
    "vo",
    "zi",
    "pe",
    "sa",
    "di",
    "gu",
    "fo",
    "be",
    "ny",
    "ha",
)


def _words(rng: random.Random) -> list[str]:
    words: set[str] = set()
    while len(words) < VOCABULARY:
        words.add("".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4))))
    return sorted(words)


def populate(rng: random.Random) -> dict[int, tuple[object, list[str]]]:
    """For each size, a user with that many facts and a session of theirs; returns
    {size: (session id, keys)}."""
    from django.contrib.auth import get_user_model

    from memory_app.models import MemoryEntry
    from sessions_app.models import Session

    words = _words(rng)
    made = {}
    for size in SIZES:
        user = get_user_model().objects.create(username=f"bench{size}")
        session = Session.objects.create(owner=user, agent="assistant", title="bench")
        keys: dict[str, None] = {}
        while len(keys) < size:
            keys.setdefault(" ".join(rng.sample(words, 2)), None)
        MemoryEntry.objects.bulk_create(
            (
                MemoryEntry(
                    key=key,
                    value=" ".join(rng.sample(words, 3)),
                    scope="user",
                    user=user,
                    written_by_kind="system",
                )
                for key in keys
            ),
            batch_size=2_000,
        )
        made[size] = (session.id, list(keys))
    return made


def main() -> None:
    parser = arguments(__doc__ or "")
    parser.add_argument("--calls", type=int, default=2_000)
    args = parser.parse_args()
    if run_each_database(__file__, args, ["--calls", str(args.calls)]):
        return
    setup_django(args.db, args.postgres)
    from django.db import connection

    from goaai.runtime.loop import memory_message
    from memory_app.selectors import memory_context

    rng = random.Random(14)
    made = populate(rng)
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
    print(f"\n== the memory part of a run's input, {args.db}, {args.calls:,} calls a case ==")

    def case(size: int, asking: bool):
        session_id, keys = made[size]
        questions = [f"what is my {key}?" for key in rng.sample(keys, 100)]
        state = {"i": 0}

        def build() -> object:
            state["i"] += 1
            query = questions[state["i"] % 100] if asking else "hello there, how are you today"
            facts = memory_context(session_id=session_id, query=query, budget=1_000)
            return memory_message(facts)

        return build

    cases = {
        (kind, size): case(size, kind == "question")
        for kind in ("question", "no match")
        for size in SIZES
    }
    for build in cases.values():
        per_call(build, 200)
    results: dict[tuple[str, int], list[float]] = {name: [] for name in cases}
    rounds = 10
    for _ in range(rounds):
        for name, build in cases.items():
            results[name].extend(per_call(build, max(1, args.calls // rounds)))
    for (kind, size), timings in results.items():
        print(f"{kind:9} {size:>6,} facts  {summary(timings)}")
    met = True
    for kind in ("question", "no match"):
        ratio = median(results[(kind, SIZES[1])]) / median(results[(kind, SIZES[0])])
        met = met and ratio <= 1.5
        print(f"{kind:9} 10,000 / 100 facts  {ratio:5.2f}x  (target <= 1.5x)")
    sys.exit(0 if met else 1)


if __name__ == "__main__":
    main()
