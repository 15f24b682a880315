"""The API is safe by itself in a host project, whatever the host's REST_FRAMEWORK and
SPECTACULAR_SETTINGS say, and mounted under whatever prefix the host picks.

A host's DRF policy (AllowAny with session and Basic authentication, IsAuthenticated with
sessions, its own parsers, renderers, filters, throttles, versioning) must not let anyone into
the API but a key or an active staff session, nor change how it answers. The walks go over
every route of scheduler_app.api.urls and every method, mounted under /cron/ by this module's
URLconf (the host's: it includes scheduler_app.urls there): an anonymous caller, Basic credentials
and a logged-in user who is not staff are refused and write nothing; a tenant key acts inside
its tenant only; a superuser's session gets through.

DRF's views read most policies once, when rest_framework.views is imported (a class attribute
each); override_settings changes only api_settings. The `host` fixture sets those attributes
as the host's settings would have, and tests/system/api/test_api_host_settings.py runs a real
host (its settings in tests/support/host_api_settings.py, its URLconf this module) in a process
of its own, where nothing of Cronfleet's deployment was ever loaded. That every view names its
own policies is tests/unit/api/test_api_host_settings.py.
"""

from __future__ import annotations

import base64
import json
from types import ModuleType
from unittest import mock

import pytest
from django.contrib.auth.models import User
from django.http import Http404, HttpResponse
from django.test import RequestFactory
from django.urls import include, path, re_path
from django.utils.crypto import get_random_string
from django.utils.html import escapejs
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.renderers import OpenApiJsonRenderer
from drf_spectacular.settings import spectacular_settings
from rest_framework.generics import GenericAPIView
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.test import APIClient
from rest_framework.views import APIView

from scheduler_app.api import handler, routing
from scheduler_app.api import urls as api_urls
from scheduler_app.models import (
    Alert,
    AlertRule,
    ApiKey,
    AuditEvent,
    Calendar,
    Job,
    JobRun,
    MaintenanceWindow,
    Tenant,
)
from tests.integration.api.test_api import client_for
from tests.integration.api.test_api_isolation import state_of as state_of_tenant
from tests.integration.api.test_api_permissions import WRITES, alpha, session_for, staff_user  # noqa: F401 (alpha: a fixture)
from tests.support.api_walk import METHODS, allowed_methods, fill
from tests.support.pages import assets_elsewhere
from tests.unit.api.test_api_host_settings import cronfleet_routes

# --- the host's URLconf: Cronfleet under /cron/, beside the host's own pages and API --------------


class HostView(APIView):
    """The host's own DRF view: never in Cronfleet's schema."""

    def get(self, request):
        return Response({"host": True})


def host_page(request):
    return HttpResponse("the host's home page")


urlpatterns = [
    path("", host_page),
    path("host-api/things/", HostView.as_view()),
    path("cron/", include("scheduler_app.urls")),  # as docs/your-project.md says to
]
MOUNT = "/cron/api/v1/"

# --- the host's DRF settings ---------------------------------------------------------------------

SESSION, BASIC = (
    "rest_framework.authentication.SessionAuthentication",
    "rest_framework.authentication.BasicAuthentication",
)
HOSTS = {
    "allow-any": {
        "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.AllowAny"],
        "DEFAULT_AUTHENTICATION_CLASSES": [SESSION, BASIC],
    },
    "is-authenticated": {
        "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
        "DEFAULT_AUTHENTICATION_CLASSES": [SESSION],
    },
    # The rest of a host's policy: none of it may reach the API either.
    "everything-else": {
        "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.AllowAny"],
        "DEFAULT_AUTHENTICATION_CLASSES": [SESSION, BASIC],
        "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.FormParser", "rest_framework.parsers.MultiPartParser"],
        "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.BrowsableAPIRenderer"],
        "DEFAULT_FILTER_BACKENDS": ["rest_framework.filters.OrderingFilter", "rest_framework.filters.SearchFilter"],
        "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
        "PAGE_SIZE": 1,
        "DEFAULT_THROTTLE_CLASSES": ["rest_framework.throttling.AnonRateThrottle"],
        "DEFAULT_THROTTLE_RATES": {"anon": "1/day"},
        "DEFAULT_VERSIONING_CLASS": "rest_framework.versioning.NamespaceVersioning",
        "ALLOWED_VERSIONS": ["v2"],
        "DEFAULT_METADATA_CLASS": "rest_framework.metadata.SimpleMetadata",
        "DEFAULT_SCHEMA_CLASS": "rest_framework.schemas.openapi.AutoSchema",
        "EXCEPTION_HANDLER": "rest_framework.views.exception_handler",
        "UNAUTHENTICATED_USER": None,
    },
}
# What DRF's classes read from REST_FRAMEWORK once, at import (attribute: setting).
IMPORT_TIME = {
    APIView: {
        "renderer_classes": "DEFAULT_RENDERER_CLASSES",
        "parser_classes": "DEFAULT_PARSER_CLASSES",
        "authentication_classes": "DEFAULT_AUTHENTICATION_CLASSES",
        "throttle_classes": "DEFAULT_THROTTLE_CLASSES",
        "permission_classes": "DEFAULT_PERMISSION_CLASSES",
        "content_negotiation_class": "DEFAULT_CONTENT_NEGOTIATION_CLASS",
        "metadata_class": "DEFAULT_METADATA_CLASS",
        "versioning_class": "DEFAULT_VERSIONING_CLASS",
    },
    GenericAPIView: {"filter_backends": "DEFAULT_FILTER_BACKENDS", "pagination_class": "DEFAULT_PAGINATION_CLASS"},
}


@pytest.fixture(params=list(HOSTS))
def host(request, settings, monkeypatch):
    """This module's URLconf, and the host's REST_FRAMEWORK as DRF would have read it at import."""
    settings.ROOT_URLCONF = __name__
    settings.REST_FRAMEWORK = HOSTS[request.param]  # DRF reloads api_settings on the change
    for cls, attributes in IMPORT_TIME.items():
        for attribute, setting in attributes.items():
            monkeypatch.setattr(cls, attribute, getattr(api_settings, setting))
    return request.param


# --- the walk ------------------------------------------------------------------------------------


STAFF_ROUTES = ("tenants",)
WRITE_METHODS = ("post", "put", "patch", "delete")
BODY = {"name": "stolen", "note": "stolen", "tag": "nightly", "action": "delete"}


def send(client, method: str, url: str, body=None):
    """Bodies as JSON: the host's REST_FRAMEWORK has no TEST_REQUEST_DEFAULT_FORMAT of ours."""
    if method in ("get", "head", "options"):
        return getattr(client, method)(url)
    return getattr(client, method)(url, body, format="json")


def every_call(a: dict):
    """(template, method, url) of every route with every method, allowed or not."""
    for template, _ in cronfleet_routes():
        for method in METHODS:
            yield template, method, f"{MOUNT}{fill(template, a)}"


def state() -> list:
    """Every row a write through the API could make, change or delete."""
    return [
        list(model.objects.order_by("pk").values())
        for model in (Tenant, Job, JobRun, ApiKey, AuditEvent, AlertRule, Alert, Calendar, MaintenanceWindow)
    ]


def error_fields(response) -> dict[str, str]:
    assert response["Content-Type"] == "application/json", response.content[:300]
    body = response.json()
    assert set(body) == {"errors"}, body
    return {error["field"]: error["message"] for error in body["errors"]}


def logged_in(user: User, a: dict) -> APIClient:
    return session_for(user, a["tenant"])


def outsider(kind: str, a: dict) -> APIClient:
    """A caller who is nobody to the API, though the host's site knows some of them."""
    if kind == "anonymous":
        return APIClient()
    if kind == "basic-superuser":  # the host's BasicAuthentication would let this one in
        user = staff_user(superuser=True)
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION="Basic " + base64.b64encode(f"{user.username}:pw".encode()).decode())
        return client
    user = User.objects.create_user(
        f"user-{get_random_string(8).lower()}", password="pw", is_superuser=kind == "superuser-not-staff"
    )
    return logged_in(user, a)


# --- who is refused -------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["anonymous", "basic-superuser", "not-staff", "superuser-not-staff"])
def test_nobody_but_a_key_or_a_staff_session_gets_in_and_nothing_is_written(alpha, host, kind):
    caller = outsider(kind, alpha)
    before, runs, jobs = state(), JobRun.objects.count(), Job.objects.count()
    walked = 0

    for _, method, url in every_call(alpha):
        response = send(caller, method, url, BODY)
        what = f"{host}: {method.upper()} {url} as {kind}: {response.status_code} {response.content[:300]!r}"
        assert response.status_code == 401, what
        assert response["WWW-Authenticate"] == 'Bearer realm="cronfleet"', what
        if method != "head":
            assert set(error_fields(response)) == {"Authorization"}, what
        assert alpha["job"].name not in response.content.decode(), what
        walked += 1

    assert (JobRun.objects.count(), Job.objects.count()) == (runs, jobs)
    assert state() == before
    assert walked == len(cronfleet_routes()) * len(METHODS)


# --- who gets in ------------------------------------------------------------------------------------


def test_a_tenant_key_reads_its_own_tenant_and_is_refused_the_staff_routes(alpha, host):
    own = client_for(alpha["tenant"])

    for template, callback in cronfleet_routes():
        url = f"{MOUNT}{fill(template, alpha)}"
        for method in sorted(allowed_methods(callback) & {"get", "head"}):
            response = send(own, method, url)
            what = f"{host}: {method.upper()} {url}: {response.status_code} {response.content[:300]!r}"
            assert response.status_code == (403 if template.split("/")[0] in STAFF_ROUTES else 200), what
    jobs = own.get(f"{MOUNT}jobs/").json()
    triggered = own.post(f"{MOUNT}jobs/{alpha['job'].id}/trigger/", format="json")

    assert set(jobs) == {"results", "next"}  # the API's keyset page, not the host's pagination
    assert [job["id"] for job in jobs["results"]] == [alpha["job"].id]
    assert triggered.status_code == 201, triggered.content[:300]
    assert JobRun.objects.filter(tenant=alpha["tenant"], id=triggered.json()["id"]).exists()


def test_another_tenant_s_key_never_reaches_the_tenant_s_objects(alpha, host):
    other = client_for(alpha["beta"])
    before = state_of_tenant(alpha)
    own_ids = {
        "jobs": alpha["job"].id,
        "runs": alpha["run"].id,
        "keys": alpha["key"].id,
        "calendars": alpha["calendar"].id,
        "windows": alpha["window"].id,
        "objectives": alpha["objective"].id,
    }

    for template, method, url in every_call(alpha):
        response = send(other, method, url, BODY)
        what = f"{host}: {method.upper()} {url}: {response.status_code} {response.content[:300]!r}"
        segment = template.split("/")[0]
        assert alpha["tenant"].slug not in response.content.decode(), what
        if segment in STAFF_ROUTES:
            assert response.status_code == 403, what
        elif "{" in template:
            assert response.status_code in (404, 405), what
        elif method == "get" and segment in own_ids and response.status_code == 200:
            assert own_ids[segment] not in {row["id"] for row in response.json()["results"]}, what

    assert state_of_tenant(alpha) == before  # B may write in its own tenant; nothing of A's changes


def test_a_superuser_session_reads_every_route(alpha, host):
    session = logged_in(staff_user(superuser=True), alpha)

    for template, callback in cronfleet_routes():
        url = f"{MOUNT}{fill(template, alpha)}"
        for method in sorted(allowed_methods(callback) & {"get", "head"}):
            response = send(session, method, url)
            assert response.status_code == 200, f"{host}: {method.upper()} {url}: {response.content[:300]!r}"


@pytest.mark.parametrize(("template", "method"), list(WRITES))
def test_a_superuser_session_gets_through_every_write_route(alpha, host, template, method):
    body, _, expected = WRITES[(template, method)]
    session = logged_in(staff_user(superuser=True), alpha)

    response = send(session, method, f"{MOUNT}{fill(template, alpha)}", body)

    assert response.status_code == expected, response.content[:500]


def test_a_staff_session_still_needs_the_route_s_permission(alpha, host):
    session = logged_in(staff_user(), alpha)

    response = session.post(f"{MOUNT}jobs/{alpha['job'].id}/trigger/", format="json")

    assert response.status_code == 403
    assert error_fields(response)["permission"].endswith("lacks the permission scheduler_app.change_job")


# --- errors under the host's prefix, without ApiErrorMiddleware -------------------------------------


@pytest.fixture
def bare_host(host, settings):
    """The host's settings and no ApiErrorMiddleware."""
    settings.MIDDLEWARE = [name for name in settings.MIDDLEWARE if not name.endswith("ApiErrorMiddleware")]
    settings.DEBUG = True  # Django's debug 404 would list every URL pattern: the API's must not
    return host


@pytest.mark.parametrize(
    ("method", "url", "message"),
    [
        ("get", "/cron/api/v1/nothing-here", "no route '/cron/api/v1/nothing-here'"),
        ("get", "/cron/api/v2/jobs/", "no route '/cron/api/v2/jobs/'"),
        ("post", "/cron/api/v1/jobs", "no route '/cron/api/v1/jobs'; the route is '/cron/api/v1/jobs/'"),
        ("get", "/cron/api/v1/stats", "no route '/cron/api/v1/stats'; the route is '/cron/api/v1/stats/'"),
    ],
)
def test_unknown_paths_under_the_host_s_prefix_answer_the_api_s_json_404(db, bare_host, method, url, message):
    response = send(APIClient(), method, url, {})

    assert response.status_code == 404
    assert error_fields(response) == {"path": message}


def test_the_api_s_own_errors_are_json_under_the_host_s_prefix(alpha, bare_host, settings):
    settings.CRONFLEET_API_MAX_BODY_BYTES = 1024
    own = client_for(alpha["tenant"])

    not_allowed = own.put(f"{MOUNT}jobs/", {}, format="json")
    options = own.options(f"{MOUNT}jobs/")
    too_large = own.post(f"{MOUNT}jobs/", {"name": "x" * 2000}, format="json")
    untyped = own.generic("POST", f"{MOUNT}jobs/", b"name=x", content_type="application/x-www-form-urlencoded")
    missing = own.get(f"{MOUNT}jobs/{alpha['job'].id + 1000}/")
    bad_key = APIClient(HTTP_AUTHORIZATION="Bearer cf_nope_nope").get(f"{MOUNT}jobs/")

    assert (not_allowed.status_code, set(error_fields(not_allowed))) == (405, {"method"})
    assert (options.status_code, set(error_fields(options))) == (405, {"method"})
    assert (too_large.status_code, set(error_fields(too_large))) == (413, {"body"})
    assert (untyped.status_code, set(error_fields(untyped))) == (415, {"Content-Type"})
    assert (missing.status_code, error_fields(missing)) == (404, {"id": "not found"})
    assert (bad_key.status_code, set(error_fields(bad_key))) == (401, {"Authorization"})


def test_the_host_s_own_pages_keep_their_errors(db, bare_host, settings):
    settings.DEBUG = False

    for url in ("/nothing-here/", "/cron/nothing-here/"):
        response = APIClient().get(url)
        assert response.status_code == 404 and response["Content-Type"].startswith("text/html"), url


def test_is_api_is_told_from_the_routes_not_a_path_prefix(db, settings):
    settings.ROOT_URLCONF = __name__
    factory = RequestFactory()

    answers = {
        url: routing.is_api(factory.get(url))
        for url in (
            "/cron/api/v1/jobs/",
            "/cron/api/v1/jobs/1/pause/",
            "/cron/api/anything",
            "/cron/api/schema/",
            "/api/v1/jobs/",
            "/",
            "/host-api/things/",
            "/cron/elsewhere/",
        )
    }

    assert answers == {
        "/cron/api/v1/jobs/": True,
        "/cron/api/v1/jobs/1/pause/": True,
        "/cron/api/anything": True,
        "/cron/api/schema/": True,
        "/api/v1/jobs/": False,
        "/": False,
        "/host-api/things/": False,
        "/cron/elsewhere/": False,
    }


def test_a_mount_without_the_catch_all_is_still_the_api_s_for_the_404_handler(db):
    """A host that includes scheduler_app.api.urls itself, with no handler.no_route after it,
    under a prefix of its own: the 404 handler still answers JSON there (if the host names it)."""
    urlconf = ModuleType("host_urls")  # a request's own URLconf, as a middleware may set one
    urlconf.urlpatterns = [re_path(r"^somewhere/(?P<n>\d+)/v1/", include(api_urls))]
    request = RequestFactory().get("/somewhere/7/v1/nothing-here")
    request.urlconf = urlconf

    api = handler.not_found(request, Http404())
    elsewhere = RequestFactory().get("/elsewhere/")
    elsewhere.urlconf = urlconf
    page = handler.not_found(elsewhere, Http404())

    assert api.status_code == 404 and json.loads(api.content) == {
        "errors": [{"field": "path", "message": "no route '/somewhere/7/v1/nothing-here'"}]
    }
    assert page.status_code == 404 and page["Content-Type"].startswith("text/html")


def test_api_error_middleware_works_under_the_host_s_prefix(alpha, settings):
    settings.ROOT_URLCONF = __name__
    own = client_for(alpha["tenant"])

    bad_host = own.get(f"{MOUNT}me", HTTP_HOST="not-an-allowed-host.example")
    page = APIClient().get("/", HTTP_HOST="not-an-allowed-host.example")

    assert (bad_host.status_code, error_fields(bad_host)) == (400, {"request": "bad request"})
    assert page.status_code == 400 and not page["Content-Type"].startswith("application/json")


# --- the schema and the docs page -------------------------------------------------------------------


def project_schema() -> dict:
    """The standalone project's schema, from its own SPECTACULAR_SETTINGS and URLconf."""
    schema = SchemaGenerator(urlconf="project.urls").get_schema(request=None, public=True)
    return json.loads(OpenApiJsonRenderer().render(schema))


def served_schema(client) -> dict:
    response = client.get("/cron/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200, response.content[:500]
    return json.loads(response.content)


def host_spectacular_settings():
    """The host's SPECTACULAR_SETTINGS, as drf-spectacular would have read them (it reads them once)."""
    values = {
        "TITLE": "Host API",
        "DESCRIPTION": "The host's",
        "VERSION": "9",
        "SCHEMA_PATH_PREFIX": "/host/",
        "SCHEMA_PATH_PREFIX_TRIM": True,
        "COMPONENT_SPLIT_REQUEST": False,
        "ENUM_NAME_OVERRIDES": {},
        "PREPROCESSING_HOOKS": [lambda endpoints: []],
        "POSTPROCESSING_HOOKS": [],
        "SWAGGER_UI_DIST": "https://cdn.example.com/swagger-ui",
        "SWAGGER_UI_FAVICON_HREF": "/host.png",
    }
    return mock.patch.multiple(spectacular_settings, **values)


def test_the_schema_is_the_project_s_under_the_host_s_prefix_whatever_the_host_s_settings(db, settings):
    settings.ROOT_URLCONF = __name__
    expected = project_schema()

    with host_spectacular_settings():
        served = served_schema(APIClient())
        assert spectacular_settings.TITLE == "Host API"  # the host's settings are left as they were

    assert served["info"]["title"] == "Cronfleet API"
    assert all(url.startswith(MOUNT) for url in served["paths"]), list(served["paths"])
    assert "/host-api/things/" not in served["paths"]
    assert json.loads(json.dumps(served).replace("/cron/api/v1/", "/api/v1/")) == expected


def test_the_docs_page_points_at_the_schema_by_name_under_the_host_s_prefix(db, settings):
    settings.ROOT_URLCONF = __name__

    with host_spectacular_settings():
        page = APIClient().get("/cron/api/docs/")

    text = page.content.decode()
    assert page.status_code == 200
    assert f'url: "{escapejs("/cron/api/schema/")}"' in text and "<title>Cronfleet API</title>" in text
    assert "drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js" in text and not assets_elsewhere(text)
