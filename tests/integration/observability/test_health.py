"""GET /healthz, as the README documents it."""

from unittest import mock

from django.db import OperationalError


def test_healthz_answers_200_without_a_key_when_the_database_answers(client, db):
    response = client.get("/healthz")

    assert (response.status_code, response.json()) == (200, {"status": "ok"})


def test_healthz_answers_503_naming_the_error_when_the_database_does_not(client, db):
    with mock.patch(
        "scheduler_app.observability.health.connection.cursor", side_effect=OperationalError("connection refused")
    ):
        response = client.get("/healthz")

    assert (response.status_code, response.json()) == (503, {"status": "error", "database": "OperationalError"})
