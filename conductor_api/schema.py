"""The token route in the OpenAPI schema: open (the key pair in its body is
the credential), yet answering errors in the error model like every route."""

from __future__ import annotations

from nodeflow.schema import ERROR_DESCRIPTIONS, ApiAutoSchema

TOKEN_ERRORS = ("400", "401", "403", "413", "415", "429", "503")


class TokenSchema(ApiAutoSchema):
    def _get_response_bodies(self, direction="response"):
        responses = super()._get_response_bodies(direction)
        component = self._error_component()
        for code in TOKEN_ERRORS:
            responses.setdefault(
                code,
                {"description": ERROR_DESCRIPTIONS[code], "content": {"application/json": {"schema": component.ref}}},
            )
        return responses
