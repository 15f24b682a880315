"""What drf-spectacular cannot see for itself: the tenant header, the errors every
operation can answer, and that request bodies refuse unknown keys; and an extend_schema that
builds on ApiSchema whatever the host's DEFAULT_SCHEMA_CLASS is."""

from __future__ import annotations

from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import OpenApiParameter
from drf_spectacular.utils import extend_schema as spectacular_extend_schema

TENANT_HEADER_PARAMETER = OpenApiParameter(
    "X-Cronfleet-Tenant",
    str,
    OpenApiParameter.HEADER,
    required=False,
    description="Staff callers only, and required for them: the slug of the tenant to act for",
)

ERROR_SCHEMA = {
    "type": "object",
    "required": ["errors"],
    "properties": {
        "errors": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["field", "message"],
                "properties": {
                    "field": {
                        "type": "string",
                        "description": 'A dotted path into the body ("schedule.cron"), '
                        'a query parameter, a header, or "body"',
                    },
                    "message": {"type": "string"},
                },
            },
        },
    },
}
ERROR_REF = {"$ref": "#/components/schemas/Error"}
ERRORS = {
    "400": "Invalid input (body, query or header); each error names its field",
    "401": "No key, or an unknown or revoked one",
    "403": "Not allowed: a staff route, another tenant named, or a quota refuses the write",
    "404": "No such object in the caller's tenant",
    "413": "The body is larger than CRONFLEET_API_MAX_BODY_BYTES",
    "415": "The body is not application/json",
    "429": "Too many requests with this key this minute",
}
ERROR_HEADERS = {
    "401": {"WWW-Authenticate": {"schema": {"type": "string"}, "description": "Bearer"}},
    "429": {"Retry-After": {"schema": {"type": "integer"}, "description": "Seconds until the limit resets"}},
}


class ApiSchema(AutoSchema):
    def get_override_parameters(self):
        parameters = super().get_override_parameters()
        if getattr(self.view, "acts_for_tenant", False):
            parameters = [*parameters, TENANT_HEADER_PARAMETER]
        return parameters


def extend_schema(**kwargs):
    """drf-spectacular's extend_schema for the API's view methods, built on ApiSchema.

    Left alone, it builds each method's schema class on REST_FRAMEWORK's DEFAULT_SCHEMA_CLASS
    as it is when the views are imported. A host that does not use drf-spectacular keeps DRF's
    own AutoSchema there, which cannot describe an operation, and the API's schema would fail
    to generate. A method that names its base schema (`kwargs["schema"]`, as an @action's
    does) is built on that instead, so each one names ApiSchema before it is decorated.
    """
    decorate = spectacular_extend_schema(**kwargs)

    def decorator(method):
        if not getattr(method, "kwargs", {}).get("schema"):
            method.kwargs = {**getattr(method, "kwargs", {}), "schema": ApiSchema}
        return decorate(method)

    return decorator


def add_error_responses(result, generator, request, public):
    """Document the error shape (errors.py) on every operation."""
    result["components"]["schemas"]["Error"] = ERROR_SCHEMA
    for path, operations in result["paths"].items():
        for operation in operations.values():
            for code, description in ERRORS.items():
                if code == "404" and "{" not in path:
                    continue
                response = {"description": description, "content": {"application/json": {"schema": ERROR_REF}}}
                if code in ERROR_HEADERS:
                    response["headers"] = ERROR_HEADERS[code]
                operation["responses"].setdefault(code, response)
    return result


def refuse_unknown_request_fields(result, generator, request, public):
    """Request bodies refuse keys they do not define (serializers.StrictSerializer)."""
    for name, schema in result["components"]["schemas"].items():
        if name.endswith("Request") and "properties" in schema:
            schema["additionalProperties"] = False
    return result
