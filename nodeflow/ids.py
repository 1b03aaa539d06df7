"""Identifiers: UUIDv7 (time-ordered, so new rows land at the end of the
primary-key index instead of scattering across it; random in their low bits,
so they reveal nothing about other namespaces' activity)."""

from __future__ import annotations

import os
import time
import uuid


def new_id() -> uuid.UUID:
    millis = time.time_ns() // 1_000_000
    raw = bytearray(millis.to_bytes(6, "big") + os.urandom(10))
    raw[6] = (raw[6] & 0x0F) | 0x70  # version 7
    raw[8] = (raw[8] & 0x3F) | 0x80  # RFC 4122 variant
    return uuid.UUID(bytes=bytes(raw))
