"""Content negotiation for every route (``DEFAULT_CONTENT_NEGOTIATION_CLASS``).

Its own module: DRF imports it while ``rest_framework.views`` is still
loading, so it must not import the views.
"""

from __future__ import annotations

from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.renderers import JSONRenderer


class JSONFirstNegotiation(DefaultContentNegotiation):
    """Every route's negotiation (``DEFAULT_CONTENT_NEGOTIATION_CLASS``). A
    request that accepts anything (no Accept header, ``*/*``,
    ``application/json``) gets JSON, the first renderer, without parsing
    the header into media types: what DRF's negotiation picks for it too,
    at a fraction of the cost. Any other Accept goes through DRF's (a
    browser's ``text/html`` gets the browsable API, a refusal its 406)."""

    PLAIN = frozenset({"*/*", "application/json"})

    def select_renderer(self, request, renderers, format_suffix=None):
        if (
            renderers
            and isinstance(renderers[0], JSONRenderer)
            and format_suffix is None
            and self.settings.URL_FORMAT_OVERRIDE not in request.query_params
            and request.META.get("HTTP_ACCEPT", "*/*").strip() in self.PLAIN  # none is */*, as DRF reads it
        ):
            return renderers[0], renderers[0].media_type
        return super().select_renderer(request, renderers, format_suffix)
