"""The OpenAPI schema is valid: drf-spectacular generates it without a warning, it declares the
bearer keys and the error shape, and the docs page serves Swagger UI from our own static files.
That the live API answers as the schema says is tests/integration/api/test_api_schema.py."""

from __future__ import annotations

import json

from django.core.management import call_command
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.renderers import OpenApiJsonRenderer

from tests.support.pages import assets_elsewhere

SCHEMA = json.loads(OpenApiJsonRenderer().render(SchemaGenerator().get_schema(request=None, public=True)))


def test_the_schema_generates_and_validates_without_warnings(tmp_path):
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(tmp_path / "schema.yaml"))

    assert (tmp_path / "schema.yaml").read_text().startswith("openapi: 3.0.3")


def test_the_schema_declares_bearer_keys_and_the_error_shape():
    assert SCHEMA["components"]["securitySchemes"]["bearerAuth"] == {
        "type": "http",
        "scheme": "bearer",
        "bearerFormat": "cf_[<cell>_]<prefix>_<secret>",
    }
    operations = [op for ops in SCHEMA["paths"].values() for op in ops.values()]
    assert all({"bearerAuth": []} in op["security"] for op in operations)
    assert all(
        op["responses"]["400"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Error"}
        for op in operations
    )


def test_the_docs_page_serves_swagger_ui_from_our_own_static_files(client):
    page = client.get("/api/docs/").content.decode()

    assert "drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js" in page
    assert not assets_elsewhere(page)
    assert assets_elsewhere('<script src="https://cdn.jsdelivr.net/x.js">')  # what it would catch
