"""What a block of a test sent to PostgreSQL, read off libpq's own trace
of the connection (not off Django's query log, which logs a ``BEGIN`` for
every atomic block, sent or not): its statements, its round trips and its
transaction control (``tests/test_with_begin.py``, ``tests/test_sync_match.py``)."""

from __future__ import annotations

import contextlib
import re
import tempfile
from collections.abc import Iterator

import psycopg
from django.db import connection

# A message the client sends: a simple Query; an extended statement's
# Parse (its text) and Bind (a prepared one names no text); what asks for
# the answers, a Sync or (in a pipeline) a Flush.
_SENT = re.compile(r"\tF\t\d+\t(Query|Parse|Bind|Sync|Flush)\b\t?(.*)")


class Sent(list):
    """What one block sent to the server, a (message, text) per message."""

    def texts(self) -> list[str]:
        """The statements' texts (a prepared statement's Bind names no text)."""
        return [text for message, text in self if message in ("Query", "Parse")]

    def round_trips(self) -> int:
        """Each simple Query, Sync and Flush waits for the server's answer;
        not a Flush psycopg sends right after a Sync, which the Sync's
        answer already holds."""
        messages = [message for message, _ in self]
        return sum(
            1
            for before, message in zip(["", *messages], messages, strict=False)
            if message in ("Query", "Sync") or (message == "Flush" and before != "Sync")
        )

    def transaction_control(self) -> list[str]:
        """``BEGIN``, ``COMMIT``, ``ROLLBACK``, and a statement sent with its ``COMMIT``."""
        return [
            text
            for message, text in self
            if message in ("Query", "Parse") and re.search(r"^(BEGIN|COMMIT|ROLLBACK)$|; COMMIT$", text)
        ]


def _text(message: str, rest: str) -> str:
    """A Query's text; a Parse's statement text; a Bind's statement name."""
    if message in ("Sync", "Flush"):
        return ""
    if message == "Query":  # "text"
        return rest.strip()[1:-1]
    _, _, after = rest.strip()[1:].partition('" "')  # "name" "text" or "portal" "statement" …
    if message == "Parse":  # a text over several lines: its first line here
        return after[: after.rindex('"')] if '"' in after else after
    return after[: after.index('"')]


@contextlib.contextmanager
def traced() -> Iterator[Sent]:
    connection.ensure_connection()
    pgconn = connection.connection.pgconn
    sent = Sent()
    with tempfile.TemporaryFile("w+") as trace:
        pgconn.trace(trace.fileno())
        pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)
        try:
            yield sent
        finally:
            pgconn.untrace()
        trace.seek(0)
        for line in trace:
            found = _SENT.search("\t" + line)
            if found:
                sent.append((found.group(1), _text(found.group(1), found.group(2))))
