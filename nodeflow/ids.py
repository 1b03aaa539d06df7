"""Identifiers: UUIDv7 (time-ordered, so new rows land at the end of the
primary-key index instead of scattering across it; random in their low bits,
so they reveal nothing about other namespaces' activity), and this
process's name (``PROCESS``)."""

from __future__ import annotations

import os
import secrets
import time
import uuid


def new_id() -> uuid.UUID:
    millis = time.time_ns() // 1_000_000
    raw = bytearray(millis.to_bytes(6, "big") + os.urandom(10))
    raw[6] = (raw[6] & 0x0F) | 0x70  # version 7
    raw[8] = (raw[8] & 0x3F) | 0x80  # RFC 4122 variant
    return uuid.UUID(bytes=bytes(raw))


def _process_name() -> str:
    return f"{os.getpid()}-{secrets.token_hex(3)}"


# This process's name in the wake-up notices (executions.notify) and the
# host's registry of parked polls (executions.handoff): its pid first, which
# tells a process that is gone. Read it as ``ids.PROCESS`` each time: a
# forked child (a server that imports before it forks its workers) names
# itself anew.
PROCESS = _process_name()


def _renamed_after_fork() -> None:
    global PROCESS
    PROCESS = _process_name()


os.register_at_fork(after_in_child=_renamed_after_fork)
