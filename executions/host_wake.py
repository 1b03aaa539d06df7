"""Host-local wake-ups: a task made ready wakes a long-poll parked in any
server process of the same host without ``NOTIFY`` (PostgreSQL, Linux, with
``NODE_FLOW_HOST_WAKE`` on; ``executions.notify`` uses it in place of the
ready notices).

Why: PostgreSQL signals every session listening in the database at each
commit that sends a notification, and each reads it in a transaction of its
own, so a ready notice costs a transaction per listening process (the
poll's process and the system-task role's at least: docs/performance.md).
Here the notice goes through the host instead.

The registry is a directory per database under ``/dev/shm`` (one host or
container), a directory per queue key in it, and a file per parked poll,
named ``<when it parked, ns>-<token>``: oldest first. The token names the
poll's own Unix datagram socket (Linux's abstract namespace: it goes when
the poll's process does), which its thread waits on. Who may lease a poll's
wake-up is decided by ``unlink``, which succeeds once: the waker that
unlinks a poll's file sends it a datagram; a poll that stops waiting
unlinks its own (if it finds it gone, it was woken, and looks again).

Ordering, so no wake-up is lost: after its commit a waker claims as many
parked polls as it made tasks ready; short of them, it marks the queue and
then searches once more. A poll that looked and found nothing lists itself,
then reads the mark. A waker whose commit that look did not see found the
poll listed, or marked the queue before its second search; if that search
too ran before the poll listed itself, the poll reads a mark moved since it
read it before its look, and looks again. A mark set before that read
means a commit before the look, which saw the task. The same mark tells a
poll that comes back at once whether its queue is still known empty
(``notify.Parked.known_empty``); a poll woken for a task looks whatever
the mark says. The sync match claims a poll of its own process here too.

A poll whose process died leaves its file: the waker that claims it finds
no socket and goes on to the next. Processes on other hosts are not in the
registry: turn this off where server processes of one database run on
several hosts (docs/deployment.md).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import itertools
import logging
import os
import secrets
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

from django.conf import settings
from django.db import connection

log = logging.getLogger(__name__)

_ADDRESS = b"\0nodeflow-wake-"
_tokens = itertools.count()


def enabled() -> bool:
    """Whether ready tasks wake polls through the host (else ``NOTIFY``)."""
    return settings.NODE_FLOW_HOST_WAKE and connection.vendor == "postgresql" and _base() is not None


def _base() -> Path | None:
    """The registry of this database on this host (None: unusable)."""
    db = settings.DATABASES["default"]
    return _directory(
        settings.NODE_FLOW_HOST_WAKE_DIR, f"{db.get('HOST')}|{db.get('PORT')}|{db.get('NAME')}|{os.getuid()}"
    )


@functools.cache
def _directory(root: str, identity: str) -> Path | None:
    if not sys.platform.startswith("linux"):  # abstract sockets are Linux's
        return None
    parent = Path(root or ("/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()))
    base = parent / f"nodeflow-wake-{hashlib.sha1(identity.encode()).hexdigest()[:12]}"
    try:
        base.mkdir(mode=0o700, exist_ok=True)
    except OSError:
        log.warning("host-local wake-ups are off: %s cannot be used", base, exc_info=True)
        return None
    return base


@functools.lru_cache(maxsize=4096)
def _names(base: Path, key: str) -> tuple[Path, Path]:
    """(the queue's directory of parked polls, its mark)."""
    digest = hashlib.sha1(key.encode()).hexdigest()[:16]
    return base / digest, base / f"{digest}.mark"


def mark(key: str) -> int:
    """When tasks of the queue ``key`` were last made ready with fewer polls
    parked than tasks (ns; 0: never)."""
    base = _base()
    if base is None:
        return 0
    try:
        return os.stat(_names(base, key)[1]).st_mtime_ns
    except FileNotFoundError:
        return 0


def parked(key: str) -> int:
    """How many polls of the queue ``key`` are parked on this host."""
    base = _base()
    try:
        return len(os.listdir(_names(base, key)[0])) if base is not None else 0
    except FileNotFoundError:
        return 0


def wake(ready: dict[str, int]) -> None:
    """After the commit that made ``ready`` (queue key → how many tasks)
    ready: wake up to that many parked polls of each queue, the longest
    parked first. Short of polls, mark the queue, then look for polls once
    more: a poll that listed itself after that look sees the mark, and
    looks again (``notify.Parked.park``)."""
    base = _base()
    if base is None:
        return
    for key, count in ready.items():
        if count <= 0:
            continue
        directory, marker = _names(base, key)
        try:
            count -= _wake_parked(directory, count)
            if count > 0:
                now = time.time_ns()
                try:
                    os.utime(marker, ns=(now, now))
                except FileNotFoundError:
                    base.mkdir(mode=0o700, exist_ok=True)  # removed under us (a /dev/shm cleaned)
                    marker.touch()
                _wake_parked(directory, count)
        except OSError:  # after the commit: the polls find the task at their re-check
            log.warning("a host-local wake-up of %s failed", key, exc_info=True)


def _wake_parked(directory: Path, count: int) -> int:
    """Wake up to ``count`` of the polls parked in ``directory``, the
    longest parked first; how many it woke."""
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        return 0
    woken = 0
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sender:
        for name in names:
            if woken >= count:
                break
            try:
                os.unlink(directory / name)
            except FileNotFoundError:
                continue  # another waker's, or the poll stopped waiting
            try:
                sender.sendto(b"r", _ADDRESS + name.partition("-")[2].encode())
            except OSError as error:
                if error.errno not in (errno.ECONNREFUSED, errno.ENOENT):
                    log.warning("a host-local wake-up failed", exc_info=True)
                continue  # its process is gone: the next one
            woken += 1
    return woken


class Waiter:
    """A parked poll's wake-up: ``threading.Event``'s ``set``, ``clear`` and
    ``wait``, on a datagram socket of its own, which a waker in any process
    of the host can set; ``park`` lists it under a queue, ``unpark`` takes it
    off again (False: a waker took it off, and set it)."""

    def __init__(self) -> None:
        self.token = f"{os.getpid()}.{next(_tokens)}.{secrets.token_hex(3)}"
        self._address = _ADDRESS + self.token.encode()
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._socket.bind(self._address)
        self._flag = threading.Event()  # set in this process: no datagram needed to see it
        self._listed: Path | None = None

    def set(self) -> None:
        self._flag.set()
        with contextlib.suppress(OSError):  # full or closed: the flag holds it
            self._socket.sendto(b"s", self._address)

    def is_set(self) -> bool:
        return self._flag.is_set()

    def clear(self) -> None:
        self._flag.clear()
        self._socket.setblocking(False)
        with contextlib.suppress(OSError):  # BlockingIOError: drained
            while True:
                self._socket.recv(16)

    def wait(self, timeout: float | None = None) -> bool:
        if self._flag.is_set():
            return True
        self._socket.settimeout(None if timeout is None else max(timeout, 0.0))
        try:
            self._socket.recv(16)
        except (TimeoutError, BlockingIOError):
            return self._flag.is_set()
        self._flag.set()
        return True

    def park(self, key: str) -> None:
        base = _base()
        if base is None or self._listed is not None:
            return
        directory = _names(base, key)[0]
        path = directory / f"{time.time_ns():019d}-{self.token}"
        try:
            path.touch()
        except FileNotFoundError:
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            path.touch()
        self._listed = path

    def unpark(self) -> bool:
        path, self._listed = self._listed, None
        if path is None:
            return True
        try:
            os.unlink(path)
        except FileNotFoundError:
            return False
        return True

    def close(self) -> None:
        self.unpark()
        self._socket.close()
