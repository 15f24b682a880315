"""Alerts in the API's schema: the routes of a job's rule (/jobs/<id>/alerts/) and of the alerts
raised (/alerts/), their filters and the rule's fields. The API itself is
tests/integration/api/test_alerts_api.py."""

from __future__ import annotations

from scheduler_app import alerts


def test_the_openapi_schema_lists_the_alert_routes():
    from tests.unit.api.test_api_schema import SCHEMA

    paths = SCHEMA["paths"]
    assert set(paths["/api/v1/jobs/{id}/alerts/"]) == {"get", "put", "patch", "delete"}
    assert set(paths["/api/v1/alerts/"]) == {"get"}
    parameters = {parameter["name"] for parameter in paths["/api/v1/alerts/"]["get"]["parameters"]}
    assert {"job", "kind", "delivered", "cursor", "limit"} <= parameters
    write = SCHEMA["components"]["schemas"]["AlertRuleWriteRequest"]
    assert set(write["properties"]) == set(alerts.RULE_FIELDS) and write["additionalProperties"] is False
