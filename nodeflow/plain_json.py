"""Plain JSON requests, dispatched without DRF's request machinery.

A worker's poll, heartbeat and result, and a start, are small JSON POSTs
sent thousands of times a second. DRF's dispatch of one (the parser its
``Request`` picks and reads with, the content negotiation and the rest of
``initial``) was about a twentieth of such a request's CPU. A
view lists the methods it serves this way
(``NamespacedView.plain_json_methods``); a request to one of them that is
plainly JSON (``is_plain``: a JSON body, an Accept that takes JSON, no
query string, no format suffix) is served by ``dispatch`` here, and any
other by DRF's own dispatch, as the plainly valid bodies of
``executions.request_bodies`` are. Both run the view's own authenticators,
permissions, throttles and checks, its handler and its exception handler,
and DRF's finalizing and rendering of the answer: the same status, body
and headers (``tests/test_plain_json.py`` sends each request both ways).
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse, QueryDict
from django.utils.datastructures import MultiValueDict
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.settings import api_settings
from rest_framework.views import APIView

from nodeflow.negotiation import JSONFirstNegotiation
from nodeflow.parsers import JSONParser
from nodeflow.wsgi_bodies import content_length

JSON = "application/json"
# Content types read as plain JSON, as they are sent (DRF reads each of them as UTF-8 JSON).
PLAIN_CONTENT_TYPES = frozenset({JSON, f"{JSON}; charset=utf-8", f"{JSON};charset=utf-8"})
_PARSER = JSONParser()


def is_plain(request: HttpRequest, view: APIView, kwargs: dict) -> bool:
    """Whether DRF would read this request as JSON and answer it with the
    view's first renderer, JSON, before anything else: then ``dispatch``
    serves it as DRF would."""
    meta = request.META
    return (
        meta.get("CONTENT_TYPE", "") in PLAIN_CONTENT_TYPES
        and not meta.get("QUERY_STRING")
        and meta.get("HTTP_ACCEPT", "*/*").strip() in JSONFirstNegotiation.PLAIN
        and api_settings.FORMAT_SUFFIX_KWARG not in kwargs
        and view.versioning_class is None
        and issubclass(view.renderer_classes[0], JSONRenderer)
    )


class PlainRequest(Request):
    """DRF's ``Request`` (its authentication, forced authentication
    included, and its proxying of the Django request), reading a body it
    knows to be JSON with the one JSON parser at once: no parser to select,
    no stream to decode. As DRF reads a JSON body: from ``request.body``,
    none at all an empty dict, and a refused one leaving empty data behind."""

    def _parse(self) -> tuple[Any, MultiValueDict]:
        request = self._request
        try:
            data = (
                _PARSER.parse_bytes(request.body, self.parser_context["encoding"])
                if content_length(request.META)
                else {}
            )
        except Exception:
            self._data = self._full_data = QueryDict("", encoding=request._encoding)
            self._files = MultiValueDict()
            raise
        return data, MultiValueDict()


def dispatch(view: APIView, request: HttpRequest, args: tuple, kwargs: dict, checks) -> HttpResponse:
    """``APIView.dispatch`` for a plainly JSON request (``is_plain``).
    ``checks(request, kwargs)``: the view's own, run after DRF's (as its
    ``initial`` runs them)."""
    view.args, view.kwargs = args, kwargs
    plain = PlainRequest(
        request,
        parsers=[_PARSER],
        authenticators=view.get_authenticators(),
        negotiator=view.get_content_negotiator(),
        parser_context=view.get_parser_context(request),
    )
    view.request = plain  # what the handler and the exception handler read
    view.headers = view.default_response_headers
    view.format_kwarg = None
    # What DRF's ``initial`` settles first: JSON (``is_plain``), no versioning.
    plain.accepted_renderer, plain.accepted_media_type = view.get_renderers()[0], JSON
    plain.version, plain.versioning_scheme = None, None
    try:
        view.perform_authentication(plain)
        view.check_permissions(plain)
        view.check_throttles(plain)
        checks(plain, kwargs)
        handler = getattr(view, request.method.lower(), view.http_method_not_allowed)
        response = handler(plain, *args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - as DRF's dispatch: every error is the exception handler's
        response = view.handle_exception(exc)
    # DRF's own finalizing; Django's handler renders it, as any DRF answer.
    view.response = view.finalize_response(plain, response, *args, **kwargs)
    return view.response
