"""goaai's SQLite backend keeps the connections a file's requests close for the
next thread that connects, and never hands out one that would be wrong."""

from __future__ import annotations

import gc
import multiprocessing
import os
import threading
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from goaai.env import env_database
from goaai.sqlite import base
from goaai.sqlite.base import DatabaseWrapper

# Each test opens connections of its own to a file of its own (the database access
# the mark allows; the suite's database is not used).
pytestmark = pytest.mark.django_db


def _wrapper(path: Path, alias: str = "pooled", **options: Any) -> DatabaseWrapper:
    config = env_database("GOAAI_TEST_POOL_DB", default=f"sqlite:///{path}")
    config["OPTIONS"].update(options)
    settings = {**connection.settings_dict, **config}
    return DatabaseWrapper(settings, alias=alias)


def _raw(wrapper: DatabaseWrapper) -> Any:
    wrapper.ensure_connection()
    return wrapper.connection


def _with_notes(path: Path) -> tuple[DatabaseWrapper, Any]:
    """A connection to ``path`` that made its table of notes, and its raw connection."""
    wrapper = _wrapper(path)
    raw = _raw(wrapper)
    with wrapper.cursor() as cursor:
        cursor.execute("CREATE TABLE notes (text TEXT)")
    return wrapper, raw


@pytest.fixture
def path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("GOAAI_TEST_POOL_DB", raising=False)
    monkeypatch.delenv("DATABASE_POOL", raising=False)
    database = tmp_path / "db.sqlite3"
    yield database
    base.close_idle()


def test_a_connection_closed_between_requests_serves_the_next_thread(path: Path):
    first, raw = _with_notes(path)
    first.close()

    found: dict[str, Any] = {}

    def another_request() -> None:
        wrapper = _wrapper(path)
        found["raw"] = _raw(wrapper)
        with wrapper.cursor() as cursor:
            cursor.execute("PRAGMA journal_mode")
            found["journal"] = cursor.fetchone()[0]
            cursor.execute("PRAGMA foreign_keys")
            found["foreign_keys"] = cursor.fetchone()[0]
            cursor.execute("INSERT INTO notes VALUES ('kept')")
        wrapper.close()

    thread = threading.Thread(target=another_request)
    thread.start()
    thread.join()
    # The same connection, with the pragmas it was opened with.
    assert found == {"raw": raw, "journal": "wal", "foreign_keys": 1}


def test_a_connection_closed_in_a_transaction_is_closed_not_kept(path: Path):
    wrapper, raw = _with_notes(path)
    wrapper.set_autocommit(False)
    with wrapper.cursor() as cursor:
        cursor.execute("INSERT INTO notes VALUES ('not committed')")
    assert raw.in_transaction
    wrapper.close()
    assert _raw(_wrapper(path)) is not raw


def test_a_file_made_again_at_the_same_path_gets_a_new_connection(path: Path):
    wrapper, raw = _with_notes(path)
    wrapper.close()
    for leftover in path.parent.glob("db.sqlite3*"):
        leftover.unlink()

    again = _wrapper(path)
    assert _raw(again) is not raw
    with again.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM sqlite_master WHERE name = 'notes'")
        # The new, empty file: not the deleted one the kept connection had open.
        assert cursor.fetchone()[0] == 0
    again.close()


def test_no_more_idle_connections_are_kept_than_allowed(path: Path):
    wrappers = [_wrapper(path, alias=f"pooled{i}", pool={"max_idle": 1}) for i in range(2)]
    raws = [_raw(w) for w in wrappers]
    for w in wrappers:
        w.close()
    again = [_raw(_wrapper(path, alias=f"again{i}", pool={"max_idle": 1})) for i in range(2)]
    assert sum(raw in raws for raw in again) == 1


def test_a_pool_turned_off_keeps_nothing(path: Path):
    wrapper = _wrapper(path, pool=False)
    raw = _raw(wrapper)
    wrapper.close()
    assert _raw(_wrapper(path, pool=False)) is not raw


def _child_connects(path: str, pipe: Any, inherited: Any = None) -> None:
    if inherited is not None:
        inherited.close()  # as Celery closes what a worker inherited
    wrapper = _wrapper(Path(path))
    pipe.send(id(_raw(wrapper)))
    wrapper.close()


def _in_a_child(path: Path, inherited: Any = None) -> int:
    fork = multiprocessing.get_context("fork")
    ours, theirs = fork.Pipe()
    child = fork.Process(target=_child_connects, args=(str(path), theirs, inherited))
    child.start()
    child_raw: int = ours.recv()
    child.join(10)
    return child_raw


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_process_opens_its_own_connection(path: Path):
    wrapper = _wrapper(path)
    raw = _raw(wrapper)
    wrapper.close()
    # The kept connection is still in the child's copy of memory: had the child
    # been given it, the ids would be equal.
    assert _in_a_child(path) != id(raw)
    assert _raw(_wrapper(path)) is raw


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_connection_open_at_the_fork_is_not_kept_by_the_child(path: Path):
    wrapper = _wrapper(path)
    raw = _raw(wrapper)
    assert _in_a_child(path, inherited=wrapper) != id(raw)
    wrapper.close()


def test_a_kept_connection_compares_vectors_without_being_equipped_again(path: Path, monkeypatch):
    from memory_app import vectors

    equip = vectors._equip
    equipped: list[object] = []

    def counted(raw: Any) -> None:
        equipped.append(raw)
        equip(raw)

    monkeypatch.setattr(vectors, "_equip", counted)
    for _ in range(3):
        wrapper = _wrapper(path)
        with wrapper.cursor() as cursor:
            # Two equal float32 vectors, [1.0]: distance 0.
            cursor.execute("SELECT vec_distance_cosine(x'0000803f', x'0000803f')")
            assert cursor.fetchone()[0] == pytest.approx(0.0)
        wrapper.close()
    assert len(equipped) == 1


# Writers queued


class _Writer(threading.Thread):
    """A thread that writes a row in a transaction of its own, held open until
    ``finish`` is set (then committed, or rolled back with ``fail``)."""

    def __init__(self, path: Path, text: str, **options: Any) -> None:
        super().__init__()
        self.path, self.text, self.options = path, text, options
        self.began = threading.Event()
        self.finish = threading.Event()
        self.fail = False
        self.error: Exception | None = None
        self.held_after: bool | None = None

    def run(self) -> None:
        from django.db import connections, transaction

        connections["writer"] = _wrapper(self.path, alias="writer", **self.options)
        try:
            with transaction.atomic(using="writer"):
                self.began.set()
                with connections["writer"].cursor() as cursor:
                    cursor.execute("INSERT INTO notes VALUES (%s)", [self.text])
                self.finish.wait(10)
                if self.fail:
                    raise RuntimeError("rolled back")
        except Exception as exc:
            self.error = exc
        finally:
            # Freed by the commit or the rollback itself, before any close.
            self.held_after = connections["writer"]._writing is not None
            connections["writer"].close()
            self.began.set()


def _notes(path: Path) -> list[str]:
    wrapper = _wrapper(path, alias="reader")
    with wrapper.cursor() as cursor:
        cursor.execute("SELECT text FROM notes ORDER BY rowid")
        rows = [row[0] for row in cursor.fetchall()]
    wrapper.close()
    return rows


@pytest.fixture
def notes(path: Path) -> Path:
    wrapper, _ = _with_notes(path)
    wrapper.close()
    return path


def test_a_writer_waits_for_the_one_writing_and_goes_when_it_commits(notes: Path):
    first, second = _Writer(notes, "first"), _Writer(notes, "second")
    first.start()
    assert first.began.wait(5)
    writer_lock = base._shared(str(notes)).writer
    # The file's writer lock is held while a transaction is open; the second
    # writer queues on it (SQLite's own wait retries at growing intervals).
    assert writer_lock.locked()
    second.start()
    assert not second.began.wait(0.3)
    first.finish.set()
    assert second.began.wait(5)
    second.finish.set()
    for writer in (first, second):
        writer.join(10)
        assert writer.error is None
        assert writer.held_after is False
    assert not writer_lock.locked()
    assert _notes(notes) == ["first", "second"]


def test_a_rollback_lets_the_next_writer_go(notes: Path):
    first, second = _Writer(notes, "first"), _Writer(notes, "second")
    first.fail = True
    first.start()
    assert first.began.wait(5)
    second.start()
    first.finish.set()
    assert second.began.wait(5)
    second.finish.set()
    first.join(10)
    second.join(10)
    assert str(first.error) == "rolled back"
    assert (first.held_after, second.error) == (False, None)
    assert not base._shared(str(notes)).writer.locked()
    assert _notes(notes) == ["second"]


def test_a_writer_that_waits_past_the_timeout_is_told_the_database_is_locked(notes: Path):
    first = _Writer(notes, "first")
    late = _Writer(notes, "late", timeout=0.2)
    first.start()
    assert first.began.wait(5)
    late.start()
    late.join(5)
    assert str(late.error) == "database is locked"
    first.finish.set()
    first.join(10)
    assert _notes(notes) == ["first"]


def test_a_connection_left_without_foreign_key_checks_is_not_kept(path: Path):
    wrapper = _wrapper(path)
    raw = _raw(wrapper)
    # What a schema change that failed before turning them back on leaves behind.
    wrapper.disable_constraint_checking()
    wrapper.close()
    again = _raw(_wrapper(path))
    assert again is not raw
    assert again.execute("PRAGMA foreign_keys").fetchone()[0] == 1


def test_a_half_read_cursor_is_closed_before_its_connection_is_kept(notes: Path):
    wrapper = _wrapper(notes)
    with wrapper.cursor() as cursor:
        cursor.executemany("INSERT INTO notes VALUES (%s)", [[str(i)] for i in range(50)])
    reading = wrapper.cursor()
    reading.execute("SELECT text FROM notes")
    assert reading.fetchone() is not None
    wrapper.close()

    writer = _Writer(notes, "after")
    writer.start()
    assert writer.began.wait(5)
    writer.finish.set()
    writer.join(10)
    # The next user of the connection writes (no old snapshot held), and the
    # half-read cursor reads no further on it.
    assert writer.error is None
    assert "after" in _notes(notes)
    with pytest.raises(Exception, match="closed"):
        reading.fetchone()


def test_a_connection_opened_with_other_options_is_not_handed_out(path: Path):
    first = _wrapper(path, timeout=7)
    raw = _raw(first)
    first.close()
    assert _raw(_wrapper(path, timeout=9)) is not raw
    assert _raw(_wrapper(path, timeout=7)) is raw


def test_a_writer_dropped_in_a_transaction_frees_the_lock_when_collected(notes: Path):
    def abandon() -> None:
        wrapper = _wrapper(notes, alias="dropped")
        wrapper.ensure_connection()
        wrapper._start_transaction_under_autocommit()
        with wrapper.cursor() as cursor:
            cursor.execute("INSERT INTO notes VALUES ('dropped')")

    thread = threading.Thread(target=abandon)
    thread.start()
    thread.join()
    gc.collect()
    assert not base._shared(str(notes)).writer.locked()
    late = _Writer(notes, "later", timeout=2)
    late.start()
    assert late.began.wait(5)
    late.finish.set()
    late.join(10)
    assert late.error is None
    assert _notes(notes) == ["later"]
