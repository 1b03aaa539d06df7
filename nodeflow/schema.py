"""drf-spectacular extensions: how our authentication appears in the OpenAPI schema."""
from drf_spectacular.extensions import OpenApiAuthenticationExtension


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
