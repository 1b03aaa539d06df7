"""Request bodies at the WSGI edge, before Django sees the request.

- **A body sent chunked** (``Transfer-Encoding: chunked``, no
  ``Content-Length``: what HTTP clients send when they stream a body from a
  generator or a file-like object) is read whole. granian, gunicorn and
  waitress all de-chunk it and say so (``wsgi.input_terminated``: their
  ``wsgi.input`` ends where the body ends), but Django reads a body only as
  far as ``CONTENT_LENGTH`` says, and without one it reads nothing: a start
  sent chunked was refused with "name: This field is required". It is read
  at most one byte past ``NODE_FLOW_MAX_BODY_BYTES`` (so a body over the
  limit gets the usual 413) and handed to Django with its length.
- **A body refused as too large is read and dropped** before the 413 goes
  out, up to ``DRAIN_FACTOR`` times the limit. The server closes the
  connection after answering; with the client still sending, the close
  reset the connection, and the client saw a broken pipe instead of the
  413 that says why. A larger body is not read: its client gets the reset.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable
from typing import Any

from django.conf import settings

WsgiApp = Callable[[dict, Callable[..., Any]], Iterable[bytes]]

DRAIN_FACTOR = 16
_PIECE = 65_536


def chunked(environ: dict) -> bool:
    """Whether the request's body comes chunked, through a server that ends
    ``wsgi.input`` where the body ends."""
    return (
        not environ.get("CONTENT_LENGTH")
        and bool(environ.get("wsgi.input_terminated"))
        and "chunked" in environ.get("HTTP_TRANSFER_ENCODING", "").lower()
    )


def with_request_bodies(app: WsgiApp) -> WsgiApp:
    """``app``, given a chunked body as if it had come with its length, and
    answering a body too large only once it has been read (when it may be)."""

    def application(environ: dict, start_response: Callable[..., Any]) -> Iterable[bytes]:
        limit = settings.NODE_FLOW_MAX_BODY_BYTES
        stream = environ["wsgi.input"]
        # How much of the body is left in ``stream`` once the request is answered (None: up to its end).
        unread: int | None
        if chunked(environ):
            body = stream.read(limit + 1)
            environ["wsgi.input"] = io.BytesIO(body)
            environ["CONTENT_LENGTH"] = str(len(body))
            unread = None if len(body) > limit else 0
        else:
            length = content_length(environ)
            unread = length if length > limit else 0
        if unread == 0:
            return app(environ, start_response)
        status: list[str] = []

        def noting_status(line: str, headers: list, exc_info: Any = None) -> Any:
            status.append(line)
            return start_response(line, headers, exc_info)

        answer = app(environ, noting_status)
        # Only an input that ends where the body ends: reading past it would wait for the next request.
        if status and status[-1].startswith("413") and environ.get("wsgi.input_terminated"):
            _drain(stream, unread, limit * DRAIN_FACTOR)
        return answer

    return application


def content_length(environ: dict) -> int:
    """The request's ``Content-Length`` (0 when it has none, or none that parses)."""
    try:
        return int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return 0


def _drain(stream: Any, unread: int | None, cap: int) -> None:
    """Read and drop what is left of the body (``unread`` bytes, or to its
    end), if that is at most ``cap`` bytes."""
    if unread is not None and unread > cap:
        return
    left = cap if unread is None else unread
    while left > 0:
        piece = stream.read(min(_PIECE, left))
        if not piece:
            return
        left -= len(piece)
