"""A server error in any of Cronfleet's pages is logged with its traceback under an id, and
the 500 answer carries the id (observability/errors.py): plain text for the check-ins and the
health endpoints, the deployment's page for the admin, in the deployment and in a host
project that installs the app (tests/support/host_urls.py, no handler500 of ours)."""

from __future__ import annotations

import logging
import re
import uuid

import pytest
from django.test import Client

from scheduler_app import services
from scheduler_app.admin.jobs import JobAdmin
from scheduler_app.observability import health

pytestmark = pytest.mark.django_db

ANSWER_ID = re.compile(r"is logged as (?:<code>)?([0-9a-f]{16})")


def boom(*args, **kwargs):
    raise RuntimeError("flood")


def logged_error(caplog, error_id: str) -> logging.LogRecord:
    """The one record of the error `error_id`, which must carry the exception's traceback."""
    records = [r for r in caplog.records if r.name.startswith("scheduler_app") and error_id in r.getMessage()]
    assert len(records) == 1, [r.getMessage() for r in caplog.records]
    record = records[0]
    assert record.levelno == logging.ERROR and record.exc_info is not None
    assert record.exc_info[0] is RuntimeError
    assert "Traceback" in caplog.text and "RuntimeError: flood" in caplog.text
    return record


def error_id_of(response) -> str:
    match = ANSWER_ID.search(response.content.decode())
    assert match is not None, response.content
    assert response["X-Cronfleet-Error-Id"] == match.group(1)
    return match.group(1)


@pytest.mark.parametrize("root", ["/", "/cron/"], ids=["deployment", "host-project"])
def test_a_ping_that_fails_answers_500_in_plain_text_with_the_id_of_its_logged_traceback(
    monkeypatch, caplog, settings, root
):
    if root == "/cron/":
        settings.ROOT_URLCONF = "tests.support.host_urls"
    monkeypatch.setattr(services, "monitored_job", boom)
    caplog.set_level(logging.ERROR, logger="scheduler_app")

    response = Client(raise_request_exception=False).get(f"{root}ping/{uuid.uuid4()}")

    assert response.status_code == 500
    assert response["Content-Type"].startswith("text/plain")
    record = logged_error(caplog, error_id_of(response))
    assert record.name == "scheduler_app.web" and "/ping/" in record.getMessage()


def test_healthz_that_fails_answers_500_in_plain_text_with_the_id(monkeypatch, caplog):
    monkeypatch.setattr(health, "connection", type("Gone", (), {"cursor": boom})())
    caplog.set_level(logging.ERROR, logger="scheduler_app")

    response = Client(raise_request_exception=False).get("/healthz")

    assert response.status_code == 500 and response["Content-Type"].startswith("text/plain")
    logged_error(caplog, error_id_of(response))


def test_an_admin_page_that_fails_shows_the_id_of_its_logged_traceback(monkeypatch, caplog, admin_user):
    monkeypatch.setattr(JobAdmin, "get_queryset", boom)
    caplog.set_level(logging.ERROR, logger="scheduler_app")
    client = Client(raise_request_exception=False)
    client.force_login(admin_user)

    response = client.get("/admin/scheduler_app/job/")

    assert response.status_code == 500 and response["Content-Type"].startswith("text/html")
    logged_error(caplog, error_id_of(response))


def test_in_a_host_project_an_admin_page_of_the_app_that_fails_is_logged_under_an_id(
    monkeypatch, caplog, admin_user, settings
):
    settings.ROOT_URLCONF = "tests.support.host_urls"
    monkeypatch.setattr(JobAdmin, "get_queryset", boom)
    caplog.set_level(logging.ERROR, logger="scheduler_app")
    client = Client(raise_request_exception=False)
    client.force_login(admin_user)

    response = client.get("/admin/scheduler_app/job/")

    assert response.status_code == 500  # the host's own 500 page
    [record] = [r for r in caplog.records if r.name == "scheduler_app.web"]
    assert re.match(r"server error [0-9a-f]{16}: GET /admin/scheduler_app/job/$", record.getMessage())
    assert record.exc_info is not None and record.exc_info[0] is RuntimeError
