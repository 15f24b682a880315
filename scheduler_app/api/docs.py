"""The API's OpenAPI schema and its Swagger UI page, as views a URLconf mounts beside the API.

drf-spectacular's own views read the project-wide SPECTACULAR_SETTINGS, and its generator
walks every route of the project. In a host project that would mean the host's title, hooks
and path prefix in our schema (or ours in the host's), and the host's own DRF views in it.
So these views carry Cronfleet's settings themselves (schema_settings.SETTINGS, laid over
drf-spectacular's defaults, never over the host's: `custom_settings`, applied only while
they answer), and the generator here describes only the API's views, at the paths they are
mounted under, whatever the prefix.

Both are public, as the standalone project serves them: they describe the API, not anyone's
data. The docs page finds the schema by URL name: "cronfleet:schema" (the app's URLconf
mounts both in the `cronfleet` namespace); `DocsView.as_view(url_name=...)` names another.

drf-spectacular applies custom_settings by patching its global settings for the length of
the request, so a host serving its own schema in another thread at that same moment may see
ours; it is drf-spectacular's way of serving more than one schema.
"""

from __future__ import annotations

from django.apps import apps
from django.urls import reverse
from drf_spectacular import plumbing
from drf_spectacular.generators import EndpointEnumerator, SchemaGenerator
from drf_spectacular.settings import SPECTACULAR_DEFAULTS, patched_settings
from drf_spectacular.utils import extend_schema
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.permissions import AllowAny

from scheduler_app.api import handler
from scheduler_app.api.schema_settings import SETTINGS
from scheduler_app.api.views import ApiViewMixin

# drf-spectacular refuses these in custom_settings: the views below set them as attributes.
_VIEW_ATTRIBUTES = ("DEFAULT_GENERATOR_CLASS",)
# Every setting at drf-spectacular's default but ours, so nothing of the host's leaks in.
CUSTOM_SETTINGS = {
    **{
        name: value
        for name, value in SPECTACULAR_DEFAULTS.items()
        if not name.startswith("SERVE_") and name not in _VIEW_ATTRIBUTES
    },
    **SETTINGS,
}


class ApiEndpoints(EndpointEnumerator):
    """Only the API's own views (ApiViewMixin), wherever they are mounted."""

    def should_include_endpoint(self, path, callback) -> bool:
        view = getattr(callback, "cls", None)
        return (
            isinstance(view, type)
            and issubclass(view, ApiViewMixin)
            and super().should_include_endpoint(path, callback)
        )


class ApiSchemaGenerator(SchemaGenerator):
    endpoint_inspector_cls = ApiEndpoints


def forget_enum_names() -> None:
    """drf-spectacular keeps the first ENUM_NAME_OVERRIDES it reads (tfranzel/drf-spectacular
    #1244), which would give our schema the host's enum names or the host's schema ours."""
    cached = getattr(plumbing, "_load_enum_name_overrides", None)
    if hasattr(cached, "cache_clear"):
        cached.cache_clear()


class PublicDocsMixin:
    """Public, unthrottled, unversioned, and in the API's error shape, whatever the host says."""

    authentication_classes = ()
    permission_classes = (AllowAny,)
    throttle_classes = ()
    content_negotiation_class = DefaultContentNegotiation
    versioning_class = None
    cronfleet_api = True  # routing.API_VIEW: errors here answer as the API's do

    def get_exception_handler(self):
        return handler.handle_exception


class SchemaView(PublicDocsMixin, SpectacularAPIView):
    """The OpenAPI 3 schema of the API (YAML, or JSON by Accept or ?format=json)."""

    generator_class = ApiSchemaGenerator
    serve_public = True
    urlconf = None  # the project's routes, so each path carries the prefix the API is mounted under
    api_version = None
    custom_settings = CUSTOM_SETTINGS

    @extend_schema(exclude=True)
    def get(self, request, *args, **kwargs):
        forget_enum_names()
        try:
            return super().get(request, *args, **kwargs)
        finally:
            forget_enum_names()


def docs_settings() -> dict:
    """CUSTOM_SETTINGS, with Swagger UI's files from drf-spectacular-sidecar where the project
    installed it (the `api-docs` extra; Cronfleet's own deployment does), else from
    drf-spectacular's default CDN: a page whose scripts are missing would be blank."""
    if apps.is_installed("drf_spectacular_sidecar"):
        return CUSTOM_SETTINGS
    return {
        **CUSTOM_SETTINGS,
        **{name: SPECTACULAR_DEFAULTS[name] for name in ("SWAGGER_UI_DIST", "SWAGGER_UI_FAVICON_HREF")},
    }


class DocsView(PublicDocsMixin, SpectacularSwaggerView):
    """Swagger UI over the schema, its files from drf-spectacular-sidecar when installed."""

    url_name = "cronfleet:schema"
    title = SETTINGS["TITLE"]

    @extend_schema(exclude=True)
    def get(self, request, *args, **kwargs):
        if self.url is None:
            # In the namespace this page was reached through, should the app be mounted twice.
            match = request.resolver_match
            self.url = reverse(self.url_name, current_app=match.namespace if match else None)
        with patched_settings(docs_settings()):
            return super().get(request, *args, **kwargs)
