"""The API is safe by itself in a real host project, run in a process of its own where nothing of
Cronfleet's deployment was ever loaded: its settings in tests/support/host_api_settings.py (DRF at
defaults of the host's own, none of Cronfleet's REST_FRAMEWORK or SPECTACULAR_SETTINGS), Cronfleet
mounted under /cron/ by tests/integration/api/test_api_host_settings.py's URLconf. Every caller
without a key is refused, the schema is the project's and the docs page Cronfleet's own.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys

from django.test import Client
from django.utils.html import escapejs

from tests.conftest import ROOT
from tests.integration.api.test_api_host_settings import BODY, MOUNT, project_schema
from tests.support.api_walk import METHODS, PARAMETERS
from tests.unit.api.test_api_host_settings import cronfleet_routes


def host_report() -> None:
    """Run in the host's process (tests/support/host_api_settings.py): what its callers get, printed as JSON."""
    client = Client()
    basic = "Basic " + base64.b64encode(b"admin:admin").decode()
    filled = {(segment, name): "1" if name == "id" else "acme" for segment, name in PARAMETERS}
    calls = []
    for template, _ in cronfleet_routes():
        url = MOUNT + re.sub(r"\{(\w+)\}", lambda m, t=template: filled[(t.split("/")[0], m.group(1))], template)
        for method in METHODS:
            for authorization in (None, basic):
                headers = {"HTTP_AUTHORIZATION": authorization} if authorization else {}
                response = (
                    getattr(client, method)(url, **headers)
                    if method in ("get", "head", "options")
                    else getattr(client, method)(url, json.dumps(BODY), content_type="application/json", **headers)
                )
                calls.append(
                    {
                        "call": f"{method.upper()} {url} basic={bool(authorization)}",
                        "status": response.status_code,
                        "type": response.get("Content-Type", ""),
                        "body": response.content.decode()[:300],
                    }
                )
    schema = client.get("/cron/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    docs = client.get("/cron/api/docs/")
    unknown = client.post("/cron/api/v1/jobs", json.dumps({}), content_type="application/json")
    print(
        json.dumps(
            {
                "calls": calls,
                "schema_status": schema.status_code,
                "schema": schema.content.decode(),
                "docs": docs.content.decode(),
                "unknown": [unknown.status_code, unknown.content.decode()],
            }
        )
    )


def test_a_host_project_with_drf_defaults_of_its_own_gets_the_same_safe_api():
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import django; django.setup(); "
            "from tests.system.api.test_api_host_settings import host_report; host_report()",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "tests.support.host_api_settings"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])

    for call in report["calls"]:
        assert call["status"] == 401, call
        assert call["call"].startswith("HEAD") or json.loads(call["body"])["errors"][0]["field"] == "Authorization", (
            call
        )
    assert len(report["calls"]) == 2 * len(METHODS) * len(cronfleet_routes())
    assert report["schema_status"] == 200, report["schema"][:2000]
    schema = json.loads(report["schema"])
    assert schema["info"]["title"] == "Cronfleet API"
    assert json.loads(json.dumps(schema).replace("/cron/api/v1/", "/api/v1/")) == project_schema()
    assert f'url: "{escapejs("/cron/api/schema/")}"' in report["docs"] and "cdn.example.com" not in report["docs"]
    assert "<title>Cronfleet API</title>" in report["docs"]
    assert report["unknown"][0] == 404 and json.loads(report["unknown"][1]) == {
        "errors": [{"field": "path", "message": "no route '/cron/api/v1/jobs'; the route is '/cron/api/v1/jobs/'"}]
    }
