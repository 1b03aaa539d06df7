"""Lease arithmetic: how long a lease lasts and when a renewed one expires.

Pure functions of a task's policy and the instants given (no clock, no
database). A lease is the start-to-close and heartbeat deadline of one
attempt: each heartbeat moves it to ``now + heartbeatTimeout``, never past
``startedAt + startToCloseTimeout``. The statements that take and renew
leases (``executions.attempts``) get their lengths and tokens from here.
"""

from __future__ import annotations

import datetime as dt
import math
import secrets

# A task with neither a heartbeat nor a start-to-close timeout is re-delivered
# when its worker has been silent this long.
DEFAULT_LEASE_S = 300.0


def new_token() -> str:
    """A lease token: 24 characters of base64url that never begin with ``-``,
    so a shell user can pass it as ``--lease TOKEN`` (argparse would take a
    leading dash for an option)."""
    token = secrets.token_urlsafe(18)
    return token if token[0] != "-" else "_" + token[1:]


def lease_seconds(policy: dict) -> float:
    """How long a lease lasts from the moment it is taken: the heartbeat
    timeout, capped by the start-to-close timeout; without either, the default."""
    heartbeat = float(policy.get("heartbeatTimeout") or 0)
    start_to_close = float(policy.get("startToCloseTimeout") or 0)
    seconds = heartbeat or start_to_close or DEFAULT_LEASE_S
    return min(seconds, start_to_close) if start_to_close > 0 else seconds


def lease_expiry(policy: dict, *, started_at: dt.datetime, now: dt.datetime, cap_s: float = math.inf) -> dt.datetime:
    """When a lease renewed ``now`` expires: ``cap_s`` at most (a system
    task's runner renews a short lease), never past startedAt + startToClose,
    unless that has passed under ALERT_ONLY: the attempt then runs on, and
    a heartbeat extends it as if it had no start-to-close timeout."""
    heartbeat = float(policy.get("heartbeatTimeout") or 0)
    start_to_close = float(policy.get("startToCloseTimeout") or 0)
    expires = now + dt.timedelta(seconds=min(heartbeat or start_to_close or DEFAULT_LEASE_S, cap_s))
    if start_to_close > 0:
        deadline = started_at + dt.timedelta(seconds=start_to_close)
        if now < deadline or policy.get("timeoutPolicy") != "ALERT_ONLY":
            expires = min(expires, deadline)
    return expires


def capped_seconds(task_lease_s: float, cap_s: float) -> float:
    """A system task's lease: the task's own, but never longer than the
    runner's cap, which the runner renews while the call runs (a runner that
    dies mid-call is noticed within the cap)."""
    return min(task_lease_s, cap_s)
