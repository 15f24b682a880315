"""The API is safe by itself in a host project, the part that needs no database: every view of
scheduler_app.api.urls names its own policies (authentication, permissions, parsers, renderers,
throttles, filters, schema, exception handler), so a host's REST_FRAMEWORK reaches none of them;
the walk over those routes finds the routes the project mounts. The walks of callers under the
host's prefix are tests/integration/api/test_api_host_settings.py; a real host in a process of
its own, tests/system/api/test_api_host_settings.py.
"""

from __future__ import annotations

from django.urls import URLResolver

from scheduler_app.api import handler, routing
from scheduler_app.api import urls as api_urls
from scheduler_app.api.auth import BearerKeyAuthentication, IsApiCaller, IsStaffCaller, StaffSessionAuthentication
from scheduler_app.api.parsers import StrictJSONParser
from scheduler_app.api.renderers import JSONRenderer
from scheduler_app.api.schema import ApiSchema
from scheduler_app.api.throttling import KeyRateThrottle
from scheduler_app.api.views import ApiViewMixin
from tests.support.api_walk import api_routes as project_api_routes
from tests.support.api_walk import template_of

# --- the walk ------------------------------------------------------------------------------------


def cronfleet_routes() -> list[tuple[str, object]]:
    """(path template under the API's mount, view callback) of every route of scheduler_app.api.urls."""
    found = []

    def walk(patterns, prefix: str) -> None:
        for pattern in patterns:
            text = prefix + template_of(pattern.pattern)
            if isinstance(pattern, URLResolver):
                walk(pattern.url_patterns, text)
            else:
                found.append((text, pattern.callback))

    walk(api_urls.urlpatterns, "")
    return found


# --- what every view names itself ----------------------------------------------------------------


def test_the_walk_finds_the_routes_the_project_mounts():
    assert sorted(template for template, _ in cronfleet_routes()) == sorted(
        template for template, _ in project_api_routes()
    )


def test_every_api_view_names_its_own_policies():
    for template, callback in cronfleet_routes():
        view = callback.cls
        what = f"{template}: {view.__name__}"
        assert issubclass(view, ApiViewMixin), what
        assert tuple(view.authentication_classes) == (BearerKeyAuthentication, StaffSessionAuthentication), what
        assert tuple(view.permission_classes) in ((IsApiCaller,), (IsStaffCaller,)), what
        assert tuple(view.parser_classes) == (StrictJSONParser,), what
        assert tuple(view.renderer_classes) == (JSONRenderer,), what
        assert tuple(view.throttle_classes) == (KeyRateThrottle,), what
        assert view.metadata_class is None and view.versioning_class is None, what
        assert tuple(view.filter_backends) == (), what
        assert isinstance(view.schema, ApiSchema), what
        assert view().get_exception_handler() is handler.handle_exception, what
        assert routing.is_api_view(callback), what
