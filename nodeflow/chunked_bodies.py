"""Request bodies sent chunked (``Transfer-Encoding: chunked``, no
``Content-Length``): what HTTP clients send when they stream a body from a
generator or a file-like object.

granian, gunicorn and waitress all de-chunk such a body and say so
(``wsgi.input_terminated``: their ``wsgi.input`` ends where the body ends),
but Django reads a request body only as far as ``CONTENT_LENGTH`` says,
and without one it reads nothing: a start sent chunked was refused with
"name: This field is required". The WSGI application therefore reads a
chunked body whole first, at most one byte past ``NODE_FLOW_MAX_BODY_BYTES``
(so a body over the limit gets the usual 413), and hands it to Django with
its length.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable
from typing import Any

from django.conf import settings

WsgiApp = Callable[[dict, Callable[..., Any]], Iterable[bytes]]


def chunked(environ: dict) -> bool:
    """Whether the request's body comes chunked, through a server that ends
    ``wsgi.input`` where the body ends."""
    return (
        not environ.get("CONTENT_LENGTH")
        and bool(environ.get("wsgi.input_terminated"))
        and "chunked" in environ.get("HTTP_TRANSFER_ENCODING", "").lower()
    )


def with_chunked_bodies(app: WsgiApp) -> WsgiApp:
    """``app``, given a chunked body as if it had come with its length."""

    def application(environ: dict, start_response: Callable[..., Any]) -> Iterable[bytes]:
        if chunked(environ):
            body = environ["wsgi.input"].read(settings.NODE_FLOW_MAX_BODY_BYTES + 1)
            environ["wsgi.input"] = io.BytesIO(body)
            environ["CONTENT_LENGTH"] = str(len(body))
        return app(environ, start_response)

    return application
