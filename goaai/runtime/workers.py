"""Who executes a run: the name a worker holds a run's lease under, and whether the
process behind such a name is known to be gone.

A lease owner is ``host:pid:thread:rand:process``. ``process`` tells the process
apart from any other that had or will have the same pid, where the system lets it
be read (Linux's ``/proc``): its start time (clock ticks since boot), its pid
namespace and the boot it runs in, as ``start.namespace.boot``; empty elsewhere.
With it, a server that starts can take up at once the runs a dead process of the
same host left, instead of waiting for their leases to expire: a pid reused by
another process, or a process of another container that shares the host name, is
never taken for the worker.
"""

from __future__ import annotations

import os
import socket
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path

# The fields of /proc/<pid>/stat after the command name: the state is the first,
# the start time the 20th (fields 3 and 22 of the whole line).
_STATE, _START = 0, 19
# A process that has ended but was not waited for yet, or is being torn down.
_ENDED_STATES = frozenset({"Z", "X", "x"})
_PROC = Path("/proc")


@dataclass(frozen=True)
class WorkerProcess:
    """The process a lease owner names: its host, its pid and what tells it apart
    from other processes with that pid (``""``: not known)."""

    host: str
    pid: int
    identity: str


def _stat_fields(pid: int | str) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (which may hold
    spaces and parentheses itself); ``None`` if there is no such process."""
    try:
        line = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    return line[line.rindex(")") + 2 :].split()


def _namespace() -> str:
    try:
        link = os.readlink(_PROC / "self" / "ns" / "pid")
    except OSError:
        return ""
    return "".join(ch for ch in link if ch.isdigit())


def _boot() -> str:
    try:
        return (_PROC / "sys" / "kernel" / "random" / "boot_id").read_text().strip()[:8]
    except OSError:
        return ""


# Computed once per process (a forked worker has a pid, and an identity, of its own).
_identities: dict[int, str] = {}


def process_identity() -> str:
    """This process's ``start.namespace.boot``, or ``""`` where it cannot be read."""
    pid = os.getpid()
    known = _identities.get(pid)
    if known is None:
        fields = _stat_fields("self")
        namespace, boot = _namespace(), _boot()
        start = fields[_START] if fields is not None and len(fields) > _START else ""
        known = f"{start}.{namespace}.{boot}" if start and namespace and boot else ""
        _identities[pid] = known
    return known


def worker_name() -> str:
    """A name for the lease holder that says which host, process and thread it is."""
    return ":".join(
        (
            socket.gethostname(),
            str(os.getpid()),
            str(threading.get_ident()),
            uuid.uuid4().hex[:8],
            process_identity(),
        )
    )


def worker_process(owner: str) -> WorkerProcess | None:
    """The process a lease owner names, if it is a name :func:`worker_name` made."""
    parts = owner.split(":")
    if len(parts) != 5 or not parts[1].isdigit():
        return None
    return WorkerProcess(host=parts[0], pid=int(parts[1]), identity=parts[4])


def process_gone(owner: str) -> bool:
    """Whether the process that held a lease as ``owner`` is known to have ended: it
    ran on this host, in this pid namespace and this boot, and no process with its
    pid and start time runs now (one that has ended but was not waited for yet
    counts as ended). ``False`` whenever that cannot be told for sure: the lease
    is then left to expire."""
    process = worker_process(owner)
    if process is None or process.host != socket.gethostname():
        return False
    start, _, place = process.identity.partition(".")
    mine = process_identity()
    if not start or not mine or place != mine.partition(".")[2]:
        return False
    if process.pid == os.getpid():
        # This process, alive: it is the one asking.
        return start != mine.partition(".")[0]
    fields = _stat_fields(process.pid)
    if fields is None:
        return True
    if len(fields) <= _START:
        return False
    return fields[_STATE] in _ENDED_STATES or fields[_START] != start


def this_host() -> str:
    return socket.gethostname()
