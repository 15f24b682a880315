"""`tenants import` holds an edited document to what the API holds a new tenant's objects to
(services/tenantcheck.py): each tampered value of the security probe (issue 40 item 3) is
refused naming the object and the field, with every problem at once, and nothing is written.

One database: the tenant is exported here and its document, given a new slug, imported here
too; every case is refused before the import's transaction, so no second cell is needed.
"""

from __future__ import annotations

import base64
import copy
import io
import json
import uuid
from datetime import date, timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from scheduler_app import services
from scheduler_app.alerts.rules import rule_set
from scheduler_app.models import (
    AlertRule,
    ApiKey,
    AuditEvent,
    Calendar,
    Job,
    MaintenanceWindow,
    Monitor,
    Tenant,
    db_now,
)
from scheduler_app.services import tenantmove
from scheduler_app.services.tenantcheck import MAX_PROBLEMS, DocumentRefused
from scheduler_app.services.windows import window_create

pytestmark = pytest.mark.django_db
TASK = "scheduler_app.echo"
MODELS = (Tenant, Job, ApiKey, Calendar, MaintenanceWindow, AlertRule, Monitor, AuditEvent)


@pytest.fixture
def document() -> dict:
    """An exported tenant's document (a cron job with an alert rule, a chained job, an HTTP
    job, a check-in, a calendar, a window, a key), renamed `moved` so it can come back here."""
    tenant = services.tenant_create(slug="moving", name="Moving", timezone="Europe/Berlin")
    services.calendar_create(tenant, name="work", country="DE")
    spec = services.JobSpec
    cron = services.job_create(tenant, spec(name="cron", cron="0 * * * *", task_name=TASK, calendar="work"))
    services.job_create(tenant, spec(name="child", after_job="cron", task_name=TASK))
    services.job_create(
        tenant, spec(name="hook", cron="30 * * * *", target_kind="http", http={"url": "https://example.com/hook"})
    )
    services.job_create(
        tenant, spec(name="checkin", cron="15 * * * *", target_kind="monitor", monitor={"grace_seconds": 60})
    )
    rule_set(cron, {"on_failure": True, "emails": ["ops@example.com"]})
    services.apikey_create(tenant=tenant, name="deploy")
    window_create(tenant, name="freeze", cron="0 22 * * 5", duration_minutes=60)
    written: list[dict] = []
    services.tenant_export(tenant, db_now() + timedelta(days=1), write=written.append, actor="test")
    moved = json.loads(tenantmove.dumps(written[0]))  # as the file holds it
    moved["tenant"]["slug"] = "moved"
    for key in moved["api_keys"]:
        key["prefix"] = "0123456789ab"  # its own rows here, beside the exported tenant's
    job(moved, "checkin")["ping_key"] = str(uuid.uuid4())
    return moved


def job(document: dict, name: str) -> dict:
    return next(row for row in document["jobs"] if row["name"] == name)


def http_job(document: dict, **config) -> None:
    job(document, "hook")["target_config"].update(config)


TAMPERED = {
    "bad slug": (lambda d: d["tenant"].update(slug="Evil Slug/../<b>x</b>"), "tenant.slug"),
    "weight over the bound": (lambda d: d["tenant"].update(weight=1001), "tenant 'moved': weight"),
    "requests a minute": (
        lambda d: d["tenant"].update(api_requests_per_minute=10**9),
        "tenant 'moved': api_requests_per_minute",
    ),
    "disallowed task": (lambda d: job(d, "cron").update(task_name="os.system"), "job 'cron': task"),
    "metadata URL": (lambda d: http_job(d, url="http://169.254.169.254/latest/meta-data/"), "job 'hook': http.url"),
    "CR/LF in a header": (
        lambda d: http_job(d, headers={"X-Trace": "a\r\nX-Evil: 1"}),
        "job 'hook': http.headers.X-Trace",
    ),
    "timeout over the max": (lambda d: job(d, "cron").update(timeout_seconds=999999), "job 'cron': timeout_seconds"),
    "interval under the minimum": (
        lambda d: (d["tenant"].update(min_interval_seconds=3600), job(d, "cron").update(cron="* * * * *")),
        "job 'cron': cron",
    ),
    "more jobs than max_jobs": (lambda d: d["tenant"].update(max_jobs=1), "jobs"),
    "holidays over the cap": (
        lambda d: d["calendars"][0].update(
            extra_holidays={(date(2030, 1, 1) + timedelta(days=i)).isoformat(): "" for i in range(1001)}
        ),
        "calendar 'work': extra_holidays",
    ),
    "smallint out of range": (lambda d: job(d, "cron").update(max_attempts=70000), "jobs[0].max_attempts"),
    "too many e-mails": (
        lambda d: job(d, "cron")["alert_rule"].update(emails=[f"x{i}@example.com" for i in range(500)]),
        "job 'cron' alert_rule: emails",
    ),
    "cooldown under the minimum": (
        lambda d: job(d, "cron")["alert_rule"].update(cooldown_seconds=0),
        "job 'cron' alert_rule: cooldown_seconds",
    ),
    "key hash not the app's": (
        lambda d: d["api_keys"][0].update(key_hash="my-own-secret"),
        "api key '0123456789ab': key_hash",
    ),
    "key prefix not the app's": (lambda d: d["api_keys"][0].update(prefix="evil"), "api key 'evil': prefix"),
    "chain in a loop": (lambda d: job(d, "cron").update(after_job="child", cron=""), "job 'cron': after_job"),
    "signing secret not whsec_": (lambda d: d.update(webhook_secret="hunter2"), "webhook_secret"),
    "previous signing secret too short": (
        lambda d: d.update(webhook_secret_previous="whsec_" + base64.b64encode(b"short").decode()),
        "webhook_secret_previous",
    ),
}


def counts() -> dict[str, int]:
    return {model.__name__: model.objects.count() for model in MODELS}


@pytest.mark.parametrize("case", list(TAMPERED))
def test_a_tampered_document_is_refused_naming_the_field_and_writes_nothing(document, case):
    tamper, field = TAMPERED[case]
    tamper(document)
    before = counts()

    with pytest.raises(services.InvalidInput) as refused:
        tenantmove.tenant_import(document, actor="test")

    fields = [problem.field for problem in getattr(refused.value, "problems", [refused.value])]
    assert field in fields, (case, str(refused.value))
    assert counts() == before


def test_the_untouched_document_imports(document):
    tenant = tenantmove.tenant_import(document, actor="test")

    assert Job.objects.filter(tenant=tenant).count() == 4
    assert AlertRule.objects.filter(job__tenant=tenant).count() == 1


def test_every_problem_comes_back_at_once_one_line_each_from_the_command(document, tmp_path):
    for case, (tamper, _) in TAMPERED.items():
        if case not in ("bad slug", "smallint out of range"):  # a row that cannot be read is not checked further
            tamper(document)
    path = tmp_path / "moved.json"
    path.write_text(json.dumps(document))
    before = counts()

    with pytest.raises(CommandError) as refused:
        call_command("tenants", "import", str(path), stdout=io.StringIO())

    lines = str(refused.value).splitlines()
    assert lines[0].startswith("tenants import: document: ") and "problems, nothing imported" in lines[0]
    assert "  job 'cron': task: 'os.system' is not an allowed task" in "\n".join(lines)
    assert len(lines) > 10
    assert counts() == before


def test_problems_past_the_cap_are_counted_not_listed(document):
    for i in range(MAX_PROBLEMS + 5):
        row = copy.deepcopy(job(document, "checkin"))
        row.update(name=f"checkin-{i}", timeout_seconds=999999)
        row.pop("ping_key")
        document["jobs"].append(row)

    with pytest.raises(DocumentRefused) as refused:
        tenantmove.tenant_import(document)

    assert len(refused.value.problems) == MAX_PROBLEMS and refused.value.more == 5
    assert refused.value.message.endswith("... and 5 more")
