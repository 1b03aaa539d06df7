"""drf-spectacular extensions: how our authentication and our errors appear
in the OpenAPI schema."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.plumbing import ResolvedComponent

from nodeflow.models import NAME_PATTERN


class ApiKeyScheme(OpenApiAuthenticationExtension):
    target_class = "nodeflow.auth.ApiKeyAuthentication"
    name = "ApiKey"

    def get_security_definition(self, auto_schema):
        return {"type": "apiKey", "in": "header", "name": "x-api-key"}


class StaffSessionScheme(OpenApiAuthenticationExtension):
    target_class = "nodeflow.auth.StaffSessionAuthentication"
    name = "StaffSession"

    def get_security_definition(self, auto_schema):
        return {"type": "apiKey", "in": "cookie", "name": "sessionid"}


# --- errors in the schema ------------------------------------------------------
# Every error body (nodeflow/errors.py) is one object; each kind adds its own
# fields (``field``/``errors`` for validation, ``control``/``limit``/``current``
# for refusals), so the object stays open.
ERROR_SCHEMA = {
    "type": "object",
    "properties": {
        "error": {"type": "string", "description": "A code: VALIDATION_ERROR, NOT_FOUND, FORBIDDEN, …"},
        "message": {"type": "string"},
        "field": {"type": "string", "nullable": True, "description": "The offending field's path, e.g. tasks[1].name"},
        "errors": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"field": {"type": "string", "nullable": True}, "message": {"type": "string"}},
                "required": ["field", "message"],
            },
        },
    },
    "required": ["error", "message"],
    "additionalProperties": True,
}
ERROR_DESCRIPTIONS = {
    "400": "Invalid input; `field` names it",
    "401": "Missing or unknown API key",
    "403": "The key may not do this, or not in this namespace",
    "404": "No such namespace or resource",
    "409": "The resource is not in a state that allows this",
    "413": "The body is larger than NODE_FLOW_MAX_BODY_BYTES",
    "415": "A content type the route does not parse",
    "429": "An execution control or namespace quota refused it",
    "503": "The database is unavailable; nothing changed; retry after Retry-After",
}
BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


def _error_codes(method: str) -> tuple[str, ...]:
    codes: tuple[str, ...] = ("400", "401", "403", "404", "503")
    if method in BODY_METHODS:
        codes += ("413", "415")
    if method in BODY_METHODS or method == "DELETE":
        codes += ("409", "429")
    return codes


# Path parameters that are names (nodeflow.models.NAME_PATTERN); ids stay plain
# strings (an id that is not a UUID is simply not found).
NAME_PARAMETERS = frozenset({"ns", "name", "task_type"})


class ApiAutoSchema(AutoSchema):
    """Documents the error answers of every authenticated operation, in the one
    error model, next to the success answers each view declares; and the form
    of the names in paths."""

    def _resolve_path_parameters(self, variables):
        parameters = super()._resolve_path_parameters(variables)
        for parameter in parameters:
            if parameter["name"] in NAME_PARAMETERS:
                parameter["schema"] = {"type": "string", "pattern": NAME_PATTERN}
        return parameters

    def _get_response_bodies(self, direction="response"):
        responses = super()._get_response_bodies(direction)
        if not getattr(self.view, "scopes", None):
            return responses  # open routes (health, schema) have no auth errors
        component = self._error_component()
        for code in _error_codes(self.method):
            responses.setdefault(
                code,
                {"description": ERROR_DESCRIPTIONS[code], "content": {"application/json": {"schema": component.ref}}},
            )
        return responses

    def _error_component(self) -> ResolvedComponent:
        component = ResolvedComponent(name="Error", type=ResolvedComponent.SCHEMA, object="Error", schema=ERROR_SCHEMA)
        self.registry.register_on_missing(component)
        return component
