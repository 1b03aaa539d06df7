"""HTTP request metrics (docs/metrics.md): every answer counted by its URL
pattern (``v1/ns/<str:ns>/tasks/poll/<str:task_type>``, not the raw path, so
the label set stays bounded), method and status, and timed.

The ``namespace`` label is the URL's namespace only for a caller whose key
may use it: an anonymous or refused request cannot make up label values.
Recording never fails a request: an error is logged and the answer goes out."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from nodeflow import metrics
from nodeflow.auth import Principal

log = logging.getLogger(__name__)

UNMATCHED = "unmatched"  # no URL pattern matched (a 404 of the router)


class HttpMetricsMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        began = time.perf_counter()
        response = self.get_response(request)
        try:
            route, namespace = _route(request)
            metrics.record_http(
                namespace, route, request.method or "", response.status_code, time.perf_counter() - began
            )
        except Exception:  # metrics must never fail the request they count
            log.exception("metrics: could not record an HTTP request")
        return response


def _route(request: HttpRequest) -> tuple[str, str]:
    match = request.resolver_match
    if match is None:
        return UNMATCHED, ""
    namespace = match.kwargs.get("ns") or ""
    # type(), not isinstance(): request.user may still be Django's lazy
    # user, and looking inside it would read the session (a query).
    user = request.__dict__.get("user")
    if namespace and not (type(user) is Principal and user.may_use(namespace)):
        namespace = ""
    return "/" + match.route, namespace
