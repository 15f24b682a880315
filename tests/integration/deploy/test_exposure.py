"""What answers whom (docs/operating-tls.md): the web's /metrics with its token, the literal
address forms refused when an alert webhook is saved (as for HTTP jobs, one judge: guard).
How guard reads a literal address is tested in tests/unit/deploy/test_exposure.py."""

from __future__ import annotations

import pytest

from tests.integration.api.test_api import client_for, errors_of, job_body


def test_metrics_refuses_a_wrong_token_of_any_shape_with_401(client, db, settings):
    settings.CRONFLEET_METRICS_TOKEN = "s3cret-token"

    answers = [
        client.get("/metrics", HTTP_AUTHORIZATION=header).status_code
        for header in (
            "",
            "Bearer",
            "Bearer s3cret",
            "Basic czNjcmV0LXRva2Vu",
            "Bearer s3cret-token\u00e9",
            "bearer s3cret-token",
        )
    ]
    refused = client.get("/metrics")
    allowed = client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret-token")

    assert answers == [401] * 6
    assert refused["WWW-Authenticate"].startswith("Bearer") and b"cronfleet_" not in refused.content
    assert allowed.status_code == 200 and b"cronfleet_nodes" in allowed.content


@pytest.mark.parametrize(
    ("url", "category"),
    [
        ("http://2130706433/hook", "loopback"),
        ("http://0177.0.0.1/hook", "loopback"),
        ("http://127.1/hook", "loopback"),
        ("http://[::ffff:127.0.0.1]/hook", "loopback"),
        ("http://2852039166/", "metadata"),
        ("http://172.16.1/", "private"),
    ],
)
def test_an_alert_webhook_at_a_refused_address_in_any_form_is_refused_when_saved(tenant, settings, url, category):
    settings.CRONFLEET_HTTP_ALLOWED_NETWORKS = []
    api = client_for(tenant)
    job = api.post("/api/v1/jobs/", job_body(name="watched"), format="json").json()

    response = api.put(f"/api/v1/jobs/{job['id']}/alerts/", {"on_failure": True, "webhook_url": url}, format="json")

    assert response.status_code == 400, response.content
    assert errors_of(response) == {
        "webhook_url": f"a {category} address is not allowed (CRONFLEET_HTTP_ALLOWED_NETWORKS)"
    }
