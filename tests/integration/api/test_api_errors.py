"""Under /api/ every error is JSON in the API's shape, with DJANGO_DEBUG on or off: unknown
paths, a missing or extra trailing slash, server errors (an id, logged with the traceback,
never the traceback or settings in the answer)."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from scheduler_app import services
from scheduler_app.api import tenants
from scheduler_app.models import Tenant

SECRET_SETTING = "super-secret-broker-password"


@pytest.fixture(params=[False, True], ids=["debug-off", "debug-on"])
def debug(request, settings):
    settings.DEBUG = request.param
    return request.param


@pytest.fixture
def api(db) -> APIClient:
    tenant = Tenant.objects.create(slug="errors", name="Errors")
    _, raw = services.apikey_create(tenant=tenant, name="errors")
    client = APIClient(raise_request_exception=False)
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    client.raw_key = raw
    return client


def errors_of(response) -> list[dict]:
    assert response["Content-Type"] == "application/json", response.content[:200]
    body = response.json()
    assert set(body) == {"errors"}, body
    return body["errors"]


@pytest.mark.parametrize(
    ("method", "path", "message"),
    [
        ("get", "/api/v1/nothing-here", "no route '/api/v1/nothing-here'"),
        ("get", "/api/v1/jobs/1.0/", "no route '/api/v1/jobs/1.0/'"),  # Django's debug 404 lists every route
        ("get", "/api/v2/jobs/", "no route '/api/v2/jobs/'"),
        # APPEND_SLASH cannot redirect a POST (a 500 under DEBUG): a 404 naming the route instead.
        ("post", "/api/v1/jobs", "no route '/api/v1/jobs'; the route is '/api/v1/jobs/'"),
        ("get", "/api/v1/jobs", "no route '/api/v1/jobs'; the route is '/api/v1/jobs/'"),
        ("get", "/api/v1/stats", "no route '/api/v1/stats'; the route is '/api/v1/stats/'"),
        # /api/v1/me answers with the slash too (tests/integration/admin/test_console_words.py).
    ],
)
def test_unknown_api_paths_answer_a_json_404_naming_the_route_meant(api, debug, method, path, message):
    response = getattr(api, method)(path, {}, format="json") if method == "post" else api.get(path)

    assert response.status_code == 404
    assert errors_of(response) == [{"field": "path", "message": message}]


def test_a_server_error_is_a_json_500_whose_id_is_logged_with_the_traceback(api, debug, settings, monkeypatch, caplog):
    settings.CELERY_BROKER_URL = f"redis://:{SECRET_SETTING}@127.0.0.1:6379/0"

    def fail(self, request):
        raise RuntimeError("the view broke")

    monkeypatch.setattr(tenants.MeView, "get", fail)

    response = api.get("/api/v1/me")

    assert response.status_code == 500
    [error] = errors_of(response)
    error_id = response["X-Cronfleet-Error-Id"]
    assert error == {"field": "server", "message": f"internal error; it is logged as {error_id}"}
    text = response.content.decode()
    assert "Traceback" not in text and SECRET_SETTING not in text and api.raw_key not in text
    [record] = [r for r in caplog.records if r.name == "scheduler_app.api"]
    assert error_id in record.getMessage() and "GET /api/v1/me" in record.getMessage()
    assert record.exc_info[0] is RuntimeError


def test_an_html_error_page_made_outside_the_api_views_becomes_json(api, debug):
    response = api.get("/api/v1/me", HTTP_HOST="not-an-allowed-host.example")

    assert response.status_code == 400
    assert errors_of(response) == [{"field": "request", "message": "bad request"}]


def test_pages_outside_the_api_keep_djangos_own_errors(db, settings):
    settings.DEBUG = False

    response = APIClient().get("/admin-nothing-here/")

    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")
