"""The host-local hand-off: a task made ready in one process is leased, in
the transaction that made it ready, for a long-poll parked in another
process of the same host, and handed to that poll over a local socket once
the transaction has committed (PostgreSQL). No ready notice, no listener's
transaction, no lease transaction of the poll's own: a start or a result
meets the worker's poll whichever server process each connection landed on.

The registry is a directory per database under ``/dev/shm`` (shared by the
processes of one host or container), a directory per queue key in it, and
a file per long-poll of a queue without controls, named by the poller id
and its state, holding what it asks for:

- ``<poller>.L`` looking: created before the poll looks (and before it
  trusts its queue to be known empty), so a task made ready during the
  look is not missed: the waker renames it ``.W``;
- ``<poller>.P`` parked: the look found nothing; a transaction that made
  tasks of the queue ready may claim it;
- ``<poller>.C-<claimer process>`` claimed: renamed so by the one
  transaction that won it (a rename succeeds once), which leases for it
  and sends the leased rows, or "nothing" after a rollback, to the poll's
  own Unix datagram socket (``<poller>.sock``), which its thread waits on;
- ``<poller>.W`` woken: tasks were made ready and not handed over; the poll
  looks again.

Controls: only queues without controls are handed over (the lease is the
poll's own, ``attempts.lease_queue(gated=False)``, which leases nothing if
the queue has controls after all); a controlled queue's polls park through
``notify.Parked`` as before. Crashes: a claimer that dies before its commit
leaves a claimed file whose process is gone: the poll looks again; one that
dies between its commit and its datagram leaves the poll to look again, and
the task's lease runs out and it is offered again, as after any poll answer
lost after its commit. A file whose poller's process is gone is removed by
the next claimer or waker that meets it. Processes on other hosts are not
in the registry: a transaction that made tasks ready and could not hand
them all over still sends the ready notice (``notify``), which the other
hosts' processes hear. See docs/engine.md, "Dispatch and leases".
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import itertools
import json
import logging
import os
import secrets
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.db import connection

from nodeflow import ids

log = logging.getLogger(__name__)

LOOKING, PARKED, WOKEN, CLAIMED = ".L", ".P", ".W", ".C-"
# A hand-off larger than this carries the leased tasks' ids, and the poll reads them.
MAX_DATAGRAM = 60_000
# How long a claimed poll waits for its claimer's datagram while the claimer lives.
SETTLE_WAIT_S = 10.0


# --- where -----------------------------------------------------------------------
def _base() -> Path | None:
    """The registry directory of this database; None where the hand-off is
    off (SQLite, ``NODE_FLOW_LOCAL_HANDOFF``) or the directory cannot be used."""
    if connection.vendor != "postgresql" or not settings.NODE_FLOW_LOCAL_HANDOFF:
        return None
    db = settings.DATABASES["default"]
    identity = f"{db.get('HOST')}|{db.get('PORT')}|{db.get('NAME')}|{os.getuid()}"
    root = settings.NODE_FLOW_HANDOFF_DIR or ("/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir())
    return _directory(str(Path(root) / f"nodeflow-{hashlib.sha1(identity.encode()).hexdigest()[:12]}"))


@functools.cache
def _directory(path: str) -> Path | None:
    base = Path(path)
    try:
        base.mkdir(mode=0o700, exist_ok=True)
        _host_tag(base)
    except OSError:
        log.warning("the host-local hand-off is off: %s cannot be used", base, exc_info=True)
        return None
    return base


@functools.cache
def _host_tag(base: Path) -> str:
    """The registry's own random tag, the same for every process that shares it."""
    path = base / "host"
    try:
        with open(path, "x") as file:
            file.write(secrets.token_hex(4))
    except FileExistsError:
        pass
    for _ in range(100):  # the creator may not have written it yet
        tag = path.read_text().strip()
        if tag:
            return tag
        time.sleep(0.001)
    raise OSError(f"{path} stays empty")


def active() -> bool:
    """Whether this process hands tasks over through the registry."""
    return _base() is not None


def host() -> str:
    """The tag of the registry this process shares ('' without one): two
    processes with the same tag reach each other's polls."""
    base = _base()
    return _host_tag(base) if base is not None else ""


def _queue_dir(base: Path, key: str) -> Path:
    return base / hashlib.sha1(key.encode()).hexdigest()[:16]


def _marker(base: Path, key: str) -> Path:
    return base / (hashlib.sha1(key.encode()).hexdigest()[:16] + ".ready")


def mark(key: str) -> int:
    """When tasks of ``key`` were last made ready without being handed over
    (0: never, or no registry): a poll's look that began before it changed
    cannot trust the queue to be empty."""
    base = _base()
    if base is None:
        return 0
    try:
        return _marker(base, key).stat().st_mtime_ns
    except FileNotFoundError:
        return 0


def _process_alive(process: str) -> bool:
    """Whether the process named by ``process`` (``ids.PROCESS``: its pid first) runs."""
    try:
        os.kill(int(process.split("-", 1)[0]), 0)
    except ProcessLookupError:
        return False
    except (ValueError, PermissionError):
        return True
    return True


def _owner(poller_id: str) -> str:
    return poller_id.rpartition(".")[0]


# --- the tasks on the wire --------------------------------------------------------
Encode = Callable[[list], bytes]  # leased tasks → a hand-off's body
Decode = Callable[[bytes], list]  # a hand-off's body → the leased tasks, for the poll to answer with
_codec: tuple[Encode, Decode] | None = None


def on_the_wire(encode: Encode, decode: Decode) -> None:
    """How leased tasks travel in a datagram (``executions.dispatch`` registers it)."""
    global _codec
    _codec = (encode, decode)


# --- the poll's side ----------------------------------------------------------------
WAKE, HANDED, NOTHING = b"w", b"h", b"n"
_spots = itertools.count()


class Spot:
    """A long-poll's file in the registry, and its own datagram socket: what
    wakes it (``set``, the hub's and ``notify.Parked``'s waiter) and what a
    claimer hands it arrive there, and the poll's thread waits on it, so a
    hand-off wakes that thread directly."""

    def __init__(self, key: str, ask: list) -> None:
        base = _base()
        assert base is not None
        directory = _queue_dir(base, key)
        directory.mkdir(mode=0o700, exist_ok=True)
        self.poller_id, self.ask = f"{ids.PROCESS}.{next(_spots)}", ask
        self.path = directory / self.poller_id
        self.address = _socket_path(base, self.poller_id)
        self.handed: list | None = None
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
            self.sock.bind(self.address)
            with open(self._name(LOOKING), "x") as file:
                file.write(json.dumps(ask))
        except BaseException:
            self._close_socket()
            raise

    def _name(self, state: str) -> str:
        return f"{self.path}{state}"

    # --- waiting ---------------------------------------------------------
    def set(self) -> None:
        """Wake the poll (from any thread or process)."""
        _send(self.address, WAKE)

    def clear(self) -> None:
        """Drop the wake-ups that came before this look (the poll is not
        claimed now: a hand-off still arriving is one it gave up waiting for)."""
        self.sock.setblocking(False)
        try:
            while True:
                if self.sock.recv(1 << 20)[:1] == HANDED:
                    log.warning("poll %s: a hand-off came after it stopped waiting; its leases run out", self.poller_id)
        except BlockingIOError:
            pass
        self.handed = None

    def wait(self, timeout: float) -> bool:
        """Until a wake-up or a hand-off arrives, or ``timeout``; whether one did."""
        self.sock.settimeout(max(timeout, 0.0))  # 0: does not block
        try:
            self._take(self.sock.recv(1 << 20))
            return True
        except (TimeoutError, BlockingIOError):
            return False

    def _take(self, data: bytes) -> None:
        kind, body = data[:1], data[1:]
        if kind == HANDED:
            assert _codec is not None
            self.handed = _codec[1](body)
        elif kind == NOTHING:
            self.handed = []

    # --- its state ---------------------------------------------------------
    @property
    def parked(self) -> bool:
        """Whether it is parked now (claimable)."""
        return os.path.exists(self._name(PARKED))

    def park(self) -> bool:
        """The look found nothing: parked, claimable. False if the poll was
        woken while it looked: it looks again."""
        try:
            os.rename(self._name(LOOKING), self._name(PARKED))
            return True
        except FileNotFoundError:
            pass
        try:
            os.rename(self._name(WOKEN), self._name(LOOKING))
        except FileNotFoundError:  # gone (taken for a dead process's): list it again
            self._write(LOOKING)
        return False

    def unpark(self, settle_s: float = SETTLE_WAIT_S) -> list:
        """The wait ended: looking again, or what a claimer leased for the
        poll once its transaction has ended (empty: look again)."""
        for state in (PARKED, WOKEN):
            try:
                os.rename(self._name(state), self._name(LOOKING))
                return []
            except FileNotFoundError:
                continue
        claimed = self._claimed()
        if claimed is None:  # gone (taken for a dead process's): list it again
            self._write(LOOKING)
            return []
        claimer = claimed.name.rpartition(CLAIMED)[2]
        give_up = time.monotonic() + settle_s
        while self.handed is None:
            if not _process_alive(claimer) or time.monotonic() > give_up:
                log.warning("poll %s: its claimer %s did not hand it anything; it looks again", self.poller_id, claimer)
                break
            self.wait(0.05)
        handed, self.handed = self.handed or [], None
        os.rename(claimed, self._name(LOOKING))
        return handed

    def _claimed(self) -> Path | None:
        prefix = self.path.name + CLAIMED
        for entry in os.scandir(self.path.parent):
            if entry.name.startswith(prefix):
                return Path(entry.path)
        return None

    def _write(self, state: str) -> None:
        with open(self._name(state), "w") as file:
            file.write(json.dumps(self.ask))

    def close(self) -> None:
        """The poll returns: its file and its socket go."""
        for state in (LOOKING, PARKED, WOKEN):
            try:
                os.unlink(self._name(state))
                break
            except FileNotFoundError:
                continue
        else:
            claimed = self._claimed()  # only if the poll failed while claimed
            if claimed is not None:
                claimed.unlink(missing_ok=True)
        self._close_socket()

    def _close_socket(self) -> None:
        self.sock.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.address)


# --- the claimer's side -----------------------------------------------------------
@dataclass
class Claim:
    """A parked poll this transaction won: lease for ``ask``, then ``deliver``."""

    poller_id: str
    ask: list


def claim(key: str) -> Claim | None:
    """Win the longest-parked poll of ``key`` on this host (None if there is
    none, or the registry fails: the task goes out by its ready notice)."""
    base = _base()
    if base is None:
        return None
    try:
        return _claim(base, key)
    except OSError:
        log.warning("the host's registry of parked polls failed; a ready notice goes instead", exc_info=True)
        return None


def _claim(base: Path, key: str) -> Claim | None:
    directory = _queue_dir(base, key)
    for path in _oldest(directory, (PARKED,)):
        poller_id = path.name[: -len(PARKED)]
        target = directory / f"{poller_id}{CLAIMED}{ids.PROCESS}"
        try:
            os.rename(path, target)
        except FileNotFoundError:
            continue  # another claimer, a waker or the poll itself was first
        if not _process_alive(_owner(poller_id)):
            target.unlink(missing_ok=True)
            Path(_socket_path(base, poller_id)).unlink(missing_ok=True)
            continue
        try:
            ask = json.loads(target.read_text())
        except (OSError, ValueError):
            _send(_socket_path(base, poller_id), NOTHING)  # the poll looks again
            continue
        return Claim(poller_id, ask)
    return None


def deliver(claim_: Claim, tasks: list | None) -> None:
    """After the claiming transaction: the leased tasks (None: it rolled back
    or leased nothing) to the poll."""
    base = _base()
    assert base is not None
    assert _codec is not None
    _send(_socket_path(base, claim_.poller_id), HANDED + _codec[0](tasks) if tasks else NOTHING)


def wake(key: str, count: int) -> None:
    """After a commit that made ``count`` tasks of ``key`` ready and could
    not hand them over: mark the queue not empty, then wake up to ``count``
    polls of it on this host, looking or parked, longest first."""
    base = _base()
    if base is None or count <= 0:
        return
    try:
        _wake(base, key, count)
    except OSError:  # after the commit: the ready notice, and the polls' re-check, still find the tasks
        log.warning("the host's registry of parked polls failed to wake a poll", exc_info=True)


def _wake(base: Path, key: str, count: int) -> None:
    marker = _marker(base, key)
    now = time.time_ns()
    try:
        os.utime(marker, ns=(now, now))
    except FileNotFoundError:
        marker.touch()
        os.utime(marker, ns=(now, now))
    for path in _oldest(_queue_dir(base, key), (PARKED, LOOKING)):
        if count <= 0:
            return
        stem, state = path.name[:-2], path.name[-2:]
        try:
            os.rename(path, path.with_name(stem + WOKEN))
        except FileNotFoundError:
            continue
        count -= 1
        if state == PARKED:
            _send(_socket_path(base, stem), WAKE)


def _oldest(directory: Path, states: tuple[str, ...]) -> list[Path]:
    """The files of ``directory`` in these states, oldest first. Any file
    whose poll's process is gone is removed, with the poll's socket."""
    found = []
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return []
    for entry in entries:
        poller_id, claimed, _ = entry.name.partition(CLAIMED)
        state = CLAIMED if claimed else poller_id[-2:]
        if not claimed:
            poller_id = poller_id[:-2]
        if not _process_alive(_owner(poller_id)):
            Path(entry.path).unlink(missing_ok=True)
            Path(_socket_path(directory.parent, poller_id)).unlink(missing_ok=True)
            continue
        if state not in states:
            continue
        try:
            found.append((entry.stat().st_mtime_ns, entry.path))
        except FileNotFoundError:
            continue
    return [Path(path) for _, path in sorted(found)]


# --- the sockets -------------------------------------------------------------------
def _socket_path(base: Path, poller_id: str) -> str:
    return str(base / f"{poller_id}.sock")


_sender = threading.local()


def _send(address: str, data: bytes) -> None:
    sock = getattr(_sender, "sock", None)
    if sock is None:
        sock = _sender.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        sock.sendto(data, address)
    except OSError:
        log.warning("a datagram to %s was not sent; its poll looks again when its wait ends", address, exc_info=True)
