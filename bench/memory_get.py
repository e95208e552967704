"""Memory reads: the runtime's scope-resolving get against a raw indexed SELECT and
against LangGraph's store, over 100k entries.

    .venv/bin/python bench/memory_get.py [--db sqlite|postgres|both] [--lookups N]

The runtime's ``rt.get_memory(key, session=...)`` resolves session → user → agent →
global, so it answers a harder question than one keyed read. It is compared with:

- raw: one indexed SELECT of a single (scope, owner, key) through the driver;
- LangGraph get: ``SqliteStore`` / ``PostgresStore`` ``get(namespace, key)``, one read;
- LangGraph resolve: the same resolution done with LangGraph, up to four gets.

Target: the runtime faster than LangGraph's store.
"""

from __future__ import annotations

import random
import sys
import uuid

from _common import arguments, median, per_call, run_each_database, setup_django, summary

SESSIONS, USERS, AGENTS = 500, 100, 10
SESSION_KEYS, USER_KEYS, AGENT_KEYS, GLOBAL_KEYS = 100, 200, 1000, 20_000


def populate() -> tuple[list[tuple[uuid.UUID, int, str]], list[dict]]:
    from django.contrib.auth import get_user_model

    from memory_app.models import MemoryEntry
    from sessions_app.models import Session

    users = get_user_model().objects.bulk_create(
        [get_user_model()(username=f"bench{i}") for i in range(USERS)]
    )
    sessions = Session.objects.bulk_create(
        [
            Session(owner=users[i % USERS], agent=f"agent{i % AGENTS}", title=f"s{i}")
            for i in range(SESSIONS)
        ]
    )
    rows, items = [], []

    def add(scope: str, key: str, value: str, **owner: object) -> None:
        rows.append(
            MemoryEntry(key=key, value=value, scope=scope, written_by_kind="system", **owner)
        )
        namespace = (scope, str(next(iter(owner.values())))) if owner else (scope,)
        items.append({"namespace": namespace, "key": key, "value": {"value": value}})

    for s in sessions:
        for k in range(SESSION_KEYS):
            add("session", f"k{k}", f"session {k}", session_id=s.id)
    for u in users:
        for k in range(USER_KEYS):
            add("user", f"k{k}", f"user {k}", user_id=u.id)
    for a in range(AGENTS):
        for k in range(AGENT_KEYS):
            add("agent", f"k{k}", f"agent {k}", agent=f"agent{a}")
    for k in range(GLOBAL_KEYS):
        add("global", f"k{k}", f"global {k}")
    MemoryEntry.objects.bulk_create(rows, batch_size=2000)
    owners = [(s.id, s.owner_id, s.agent) for s in sessions]
    return owners, items


def main() -> None:
    parser = arguments(__doc__ or "")
    parser.add_argument("--lookups", type=int, default=5000)
    args = parser.parse_args()
    if run_each_database(__file__, args, ["--lookups", str(args.lookups)]):
        return
    url = setup_django(args.db, args.postgres)
    from goaai.runtime import rt

    owners, items = populate()
    print(f"\n== memory get, {args.db}, {len(items):,} entries, {args.lookups:,} lookups ==")
    queries = _queries(owners, args.lookups)
    # Warm up connections and caches.
    for (sid, _, _), key in queries[:200]:
        assert rt.get_memory(key, session=sid) is not None

    store, closer = _langgraph_store(args.db, url)
    try:
        _load(store, items)
        paths = {
            "runtime resolve": lambda o, k: rt.get_memory(k, session=o[0]),
            "raw SELECT (one scope)": _raw_select(args.db),
            **_langgraph_paths(store),
        }
        results = _timed(paths, queries, args.lookups)
    finally:
        closer()
    _report(results)


def _queries(owners: list[tuple[uuid.UUID, int, str]], lookups: int) -> list[tuple[tuple, str]]:
    """Random (owner, key) lookups, the same on every run."""
    rng = random.Random(7)
    # Keys that resolve at every level: session (k0-99), user (k100-199),
    # agent (k200-999), global (k1000+).
    return [
        (
            rng.choice(owners),
            f"k{rng.choice([rng.randrange(0, 100), rng.randrange(100, 200), rng.randrange(200, 1000), rng.randrange(1000, 20000)])}",
        )
        for _ in range(lookups)
    ]


def _cycle(queries: list[tuple[tuple, str]], fn):
    """A call of ``fn`` on the next lookup each time, round and round."""
    state = {"i": 0}

    def call() -> object:
        owner, key = queries[state["i"] % len(queries)]
        state["i"] += 1
        return fn(owner, key)

    return call


def _raw_select(db: str):
    """One indexed SELECT of a single (scope, owner, key), through the driver."""
    import psycopg
    from django.db import connection

    raw_conn = connection.connection
    if db == "sqlite":
        raw_sql = (
            "SELECT value FROM memory_app_memoryentry "
            "WHERE scope = 'session' AND session_id = ? AND key = ?"
        )

        def raw(owner, key):
            return raw_conn.execute(raw_sql, (owner[0].hex, key)).fetchone()

        return raw
    raw_sql = (
        "SELECT value FROM memory_app_memoryentry "
        "WHERE scope = 'session' AND session_id = %s AND key = %s"
    )
    # Server-side binding: the statement is prepared once, as goaai's own are.
    raw_cursor = psycopg.Cursor(raw_conn)

    def raw(owner, key):
        raw_cursor.execute(raw_sql, (owner[0], key), prepare=True)
        return raw_cursor.fetchone()

    return raw


def _load(store, items: list[dict]) -> None:
    from langgraph.store.base import PutOp

    for start in range(0, len(items), 5000):
        store.batch([PutOp(**item) for item in items[start : start + 5000]])


def _langgraph_paths(store) -> dict:
    def lg_get(owner, key):
        return store.get(("session", str(owner[0])), key)

    def lg_resolve(owner, key):
        sid, uid, agent = owner
        namespaces = (("session", str(sid)), ("user", str(uid)), ("agent", agent), ("global",))
        for namespace in namespaces:
            item = store.get(namespace, key)
            if item is not None:
                return item
        return None

    return {"LangGraph get (one scope)": lg_get, "LangGraph resolve": lg_resolve}


def _timed(paths: dict, queries: list[tuple[tuple, str]], lookups: int) -> dict[str, list[float]]:
    for fn in paths.values():
        for o, k in queries[:200]:
            fn(o, k)
    # Rounds that alternate the paths, so that drift on a shared machine hits
    # every path alike.
    results: dict[str, list[float]] = {name: [] for name in paths}
    rounds = 10
    per_round = max(1, lookups // rounds)
    for _ in range(rounds):
        for name, fn in paths.items():
            results[name].extend(per_call(_cycle(queries, fn), per_round))
    return results


def _report(results: dict[str, list[float]]) -> None:
    for name, timings in results.items():
        print(f"{name:28} {summary(timings)}")
    ours = median(results["runtime resolve"])
    print(
        f"runtime / raw SELECT            {ours / median(results['raw SELECT (one scope)']):6.2f}x"
    )
    print(
        f"runtime / LangGraph get         {ours / median(results['LangGraph get (one scope)']):6.2f}x  (target < 1)"
    )
    print(f"runtime / LangGraph resolve     {ours / median(results['LangGraph resolve']):6.2f}x")


def _langgraph_store(db: str, url: str):
    if db == "sqlite":
        import sqlite3
        import tempfile

        from langgraph.store.sqlite import SqliteStore

        path = f"{tempfile.mkdtemp(prefix='langgraph-')}/store.sqlite3"
        conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        store = SqliteStore(conn)
        store.setup()
        return store, conn.close
    from langgraph.store.postgres import PostgresStore

    manager = PostgresStore.from_conn_string(url.replace("postgres://", "postgresql://"))
    store = manager.__enter__()
    store.setup()
    return store, lambda: manager.__exit__(None, None, None)


if __name__ == "__main__":
    sys.exit(main())
