"""Plain JSON requests, dispatched without DRF's request machinery.

A worker's poll, heartbeat and result, and a start, are small JSON POSTs
sent thousands of times a second. DRF's dispatch of one (its ``Request``,
the parser it picks and the stream it decodes, the content negotiation and
the rest of ``initial``) was about a twentieth of such a request's CPU. A
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

from django.http import HttpRequest, HttpResponse
from rest_framework import exceptions
from rest_framework.renderers import JSONRenderer
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
        # DRF's test client's forced authentication replaces the authenticators.
        and getattr(request, "_force_auth_user", None) is None
        and getattr(request, "_force_auth_token", None) is None
    )


class PlainRequest:
    """What a view and DRF's checks use of a ``rest_framework.request.Request``,
    for a plainly JSON request: its body parsed by the JSON parser every
    route has (``nodeflow.parsers``), its user authenticated as DRF does
    (the view's authenticators in turn, the first answer wins, a refusal
    leaves it unauthenticated). Anything else is the Django request's."""

    def __init__(self, request: HttpRequest, authenticators: list) -> None:
        self._request = request
        self.authenticators = authenticators
        self.method = request.method
        self.content_type = request.META.get("CONTENT_TYPE", "")
        self.accepted_renderer: JSONRenderer | None = None
        self.accepted_media_type = JSON
        self.version = self.versioning_scheme = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._request, name)

    @property
    def query_params(self):
        return self._request.GET

    @property
    def data(self) -> Any:
        if "_data" not in self.__dict__:
            self._data = self._parsed()
        return self._data

    def _parsed(self) -> Any:
        """The body as DRF's Request reads it: none at all is an empty
        dict; one already read is parsed from what was read."""
        request = self._request
        if not content_length(request.META):
            return {}
        return _PARSER.parse_bytes(request.body if request._read_started else request.read())

    @property
    def user(self):
        if "_user" not in self.__dict__:
            self._authenticate()
        return self._user

    @property
    def auth(self):
        if "_user" not in self.__dict__:
            self._authenticate()
        return self._auth

    @property
    def successful_authenticator(self):
        if "_user" not in self.__dict__:
            self._authenticate()
        return self._authenticator

    def _authenticate(self) -> None:
        for authenticator in self.authenticators:
            try:
                found = authenticator.authenticate(self)
            except exceptions.APIException:
                self._set(None, None, None)
                raise
            if found is not None:
                self._set(authenticator, *found)
                return
        self._set(None, None, None)

    def _set(self, authenticator, user, auth) -> None:
        # UNAUTHENTICATED_USER and _TOKEN are None (settings.REST_FRAMEWORK).
        self._authenticator, self._user, self._auth = authenticator, user, auth
        # As DRF's Request sets them: middleware reads the user.
        self._request.user, self._request.auth = user, auth


def dispatch(view: APIView, request: HttpRequest, args: tuple, kwargs: dict, checks) -> HttpResponse:
    """``APIView.dispatch`` for a plainly JSON request (``is_plain``).
    ``checks(request, kwargs)``: the view's own, run after DRF's (as its
    ``initial`` runs them)."""
    view.args, view.kwargs = args, kwargs
    plain = PlainRequest(request, view.get_authenticators())
    view.request = plain  # what the handler and the exception handler read
    view.headers = view.default_response_headers
    view.format_kwarg = None
    plain.accepted_renderer = view.get_renderers()[0]
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
