"""Bad input through the API: a 4xx naming the field, and nothing written.

Each case sends one request (a JSON body, raw bytes, or a query) and expects a status and
the field the first error names. Before and after, the tenant's jobs (every column), runs,
audit events, keys and tenants are compared. The parser's own cap is
tests/unit/api/test_api_bad_input.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta
from urllib.parse import quote

import pytest
from rest_framework.test import APIClient

from scheduler_app import services
from scheduler_app.models import ApiKey, AuditEvent, Job, JobRun, Tenant, db_now
from tests.integration.api.test_api import client_for, errors_of, job_body, make_tenant

TASK = {"kind": "task", "task": "scheduler_app.echo"}
HTTP = {"kind": "http", "url": "https://example.com/"}


@dataclass(frozen=True)
class Case:
    id: str
    body: dict | bytes | None
    field: str
    status: int = 400
    method: str = "post"
    url: str = "/api/v1/jobs/"  # {job} is the existing job's id, {other_job} another tenant's
    content_type: str = "application/json"
    settings: tuple = ()  # (name, value) pairs set for the request


def schedule(value) -> dict:
    return job_body(name="new", schedule=value)


def raw(text: str) -> bytes:
    return text.encode()


def raw_every(number: str) -> bytes:
    return raw(
        '{"name": "new", "target": {"kind": "task", "task": "scheduler_app.echo"}, '
        f'"schedule": {{"every": {number}}}}}'
    )


PAST = "2020-01-01T00:00:00Z"
CASES = [
    # cron
    Case("cron-minute-out-of-range", schedule({"cron": "61 * * * *"}), "schedule.cron"),
    Case("cron-too-few-fields", schedule({"cron": "* * *"}), "schedule.cron"),
    Case("cron-bad-step", schedule({"cron": "*/0 * * * *"}), "schedule.cron"),
    Case("cron-never-fires", schedule({"cron": "0 0 31 2 *"}), "schedule.cron"),
    Case("cron-six-fields", schedule({"cron": "0 0 * * * *"}), "schedule.cron"),
    Case("cron-non-ascii", schedule({"cron": "0 0 * * \u6708"}), "schedule.cron"),
    Case("cron-unknown-nickname", schedule({"cron": "@fortnightly"}), "schedule.cron"),
    Case("cron-empty", schedule({"cron": ""}), "schedule.cron"),
    Case("cron-a-number", schedule({"cron": 5}), "schedule.cron"),
    Case("cron-with-CRON_TZ", schedule({"cron": "CRON_TZ=Europe/Paris 0 3 * * *"}), "schedule.cron"),
    Case("cron-with-TZ", schedule({"cron": "TZ=UTC 0 3 * * *"}), "schedule.cron"),
    Case("zone-unknown", schedule({"cron": "0 3 * * *", "timezone": "Mars/Olympus"}), "schedule.timezone"),
    Case("zone-a-folder", schedule({"cron": "0 3 * * *", "timezone": "America"}), "schedule.timezone"),
    Case("zone-path-traversal", schedule({"cron": "0 3 * * *", "timezone": "../../etc/passwd"}), "schedule.timezone"),
    Case("zone-with-an-interval", schedule({"every": 60, "timezone": "UTC"}), "schedule.timezone"),
    # schedule shape
    Case("schedule-two-kinds", schedule({"cron": "0 3 * * *", "every": 60}), "schedule"),
    Case("schedule-empty", schedule({}), "schedule"),
    Case("schedule-a-string", schedule("0 3 * * *"), "schedule"),
    Case("schedule-missing", {"name": "new", "target": TASK}, "schedule"),
    # every
    Case("every-zero", schedule({"every": 0}), "schedule.every"),
    Case("every-negative", schedule({"every": -5}), "schedule.every"),
    Case("every-NaN", raw_every("NaN"), "schedule.every"),
    Case("every-Infinity", raw_every("Infinity"), "schedule.every"),
    Case("every-minus-Infinity", raw_every("-Infinity"), "schedule.every"),
    Case("every-1e309", raw_every("1e309"), "schedule.every"),
    Case("every-10**30", schedule({"every": 10**30}), "schedule.every"),
    Case("every-ten-years-and-more", schedule({"every": 11 * 366 * 86400}), "schedule.every"),
    Case("every-a-string", schedule({"every": "300"}), "schedule.every"),
    Case("every-true", schedule({"every": True}), "schedule.every"),
    Case("every-a-fraction", schedule({"every": 1.5}), "schedule.every"),
    Case("every-a-float", schedule({"every": 300.0}), "schedule.every"),
    Case("every-5000-digits", raw_every("9" * 5000), "body"),
    # at
    Case("at-in-the-past", schedule({"at": PAST}), "schedule.at"),
    Case("at-naive", schedule({"at": "2030-01-01T09:00:00"}), "schedule.at"),
    # Local times are never accepted, so these are refused as naive, never guessed.
    Case("at-nonexistent-local-time", schedule({"at": "2030-03-31T02:30:00"}), "schedule.at"),
    Case("at-ambiguous-local-time", schedule({"at": "2030-10-27T02:30:00"}), "schedule.at"),
    Case("at-a-date", schedule({"at": "2030-01-01"}), "schedule.at"),
    Case("at-year-9999", schedule({"at": "9999-06-01T00:00:00Z"}), "schedule.at"),
    Case("at-past-the-end-of-time", schedule({"at": "9999-12-31T23:59:59-12:00"}), "schedule.at"),
    Case("at-month-13", schedule({"at": "2030-13-01T00:00:00Z"}), "schedule.at"),
    Case("at-words", schedule({"at": "tomorrow"}), "schedule.at"),
    Case("at-a-number", schedule({"at": 1893456000}), "schedule.at"),
    Case("start-naive", job_body(name="new", start_at="2030-01-01T00:00:00"), "start_at"),
    # digits other than ASCII 0-9, which parse_datetime reads as if they were
    Case("at-full-width-year", schedule({"at": "\uff12\uff10\uff13\uff10-01-01T00:00:00Z"}), "schedule.at"),
    Case("at-full-width-offset", schedule({"at": "2030-01-01T00:00:00+\uff10\uff11:00"}), "schedule.at"),
    Case("start-one-full-width-digit", job_body(name="new", start_at="2030-01-0\uff11T00:00:00Z"), "start_at"),
    Case("end-arabic-indic-digits", job_body(name="new", end_at="\u0662\u0660\u0663\u0660-01-01T00:00:00Z"), "end_at"),
    Case(
        "patch-end-devanagari-digit",
        {"end_at": "2030-01-01T0\u0966:00:00Z"},
        "end_at",
        method="patch",
        url="/api/v1/jobs/{job}/",
    ),
    Case("end-in-the-past", job_body(name="new", end_at=PAST), "end_at"),
    Case("end-in-the-past-in-another-offset", job_body(name="new", end_at="2024-06-01T02:00:00+02:00"), "end_at"),
    Case("patch-end-in-the-past", {"end_at": PAST}, "end_at", method="patch", url="/api/v1/jobs/{job}/"),
    Case("impact-end-in-the-past", {"end_at": PAST}, "end_at", url="/api/v1/jobs/{job}/impact/"),
    Case(
        "end-before-start",
        job_body(name="new", start_at="2030-01-02T00:00:00Z", end_at="2030-01-01T00:00:00Z"),
        "end_at",
    ),
    # the body as a whole
    Case("body-over-the-limit", job_body(name="new", description="x" * (256 * 1024)), "body", 413),
    Case("nested-10000-deep", raw('{"name": "new", "description": ' + "[" * 10_000 + "]" * 10_000 + "}"), "body"),
    Case("nested-40-deep", raw('{"name": "new", "description": ' + "[" * 40 + "]" * 40 + "}"), "body"),
    Case("invalid-utf8", b'{"name": "\xff\xfe", "schedule": {"every": 60}}', "body"),
    Case("invalid-json", raw('{"name": "new",'), "body"),
    Case("duplicate-key", raw('{"name": "new", "name": "other"}'), "body"),
    Case("a-list", raw("[1, 2]"), "body"),
    Case("form-encoded", b"name=new", "Content-Type", 415, content_type="application/x-www-form-urlencoded"),
    # text
    Case("name-with-NUL", job_body(name="bad\u0000name"), "name"),
    Case("name-lone-surrogate", raw('{"name": "\\ud800", "schedule": {"every": 60}}'), "name"),
    Case("key-lone-surrogate", raw('{"\\udfff": 1}'), "body"),
    Case("name-with-a-control-character", job_body(name="bad\u0007name"), "name"),
    Case("name-with-bidi-override", job_body(name="invoice\u202egpj.exe"), "name"),
    Case("name-blank", job_body(name="   "), "name"),
    Case("name-too-long", job_body(name="n" * 201), "name"),
    Case("name-with-line-separator", job_body(name="two\u2028lines"), "name"),
    Case("name-with-isolate", job_body(name="a\u2067b"), "name"),
    Case("tag-with-bidi-override", job_body(name="new", tags=["ok", "b\u202ead"]), "tags.1"),
    Case("tag-with-paragraph-separator", job_body(name="new", tags=["a\u2029b"]), "tags.0"),
    Case("description-with-bidi-override", job_body(name="new", description="pays \u202e001$"), "description"),
    Case("description-with-isolate", job_body(name="new", description="a\u2066b\u2069"), "description"),
    Case("description-with-line-separator", job_body(name="new", description="a\u2028b"), "description"),
    Case("description-with-escape-sequence", job_body(name="new", description="\u001b[2Jok"), "description"),
    Case("description-with-a-lone-CR", job_body(name="new", description="done\rfailed"), "description"),
    Case("description-with-C1-control", job_body(name="new", description="a\u0085b"), "description"),
    Case(
        "patch-description-with-bidi-override",
        {"description": "\u202e"},
        "description",
        method="patch",
        url="/api/v1/jobs/{job}/",
    ),
    Case("too-many-tags", job_body(name="new", tags=[f"t{n}" for n in range(21)]), "tags"),
    Case("tags-not-a-list", job_body(name="new", tags="nightly"), "tags"),
    # fields
    Case("unknown-field", {**job_body(name="new"), "nmae": "typo"}, "nmae"),
    Case("read-only-field", {**job_body(name="new"), "version": 7}, "version"),
    Case(
        "patch-read-only-field",
        {"next_run_at": "2030-01-01T00:00:00Z"},
        "next_run_at",
        method="patch",
        url="/api/v1/jobs/{job}/",
    ),
    Case("unknown-schedule-field", schedule({"every": 60, "anchor": PAST}), "schedule.anchor"),
    Case("timeout-zero", job_body(name="new", timeout_seconds=0), "timeout_seconds"),
    Case("timeout-10**30", job_body(name="new", timeout_seconds=10**30), "timeout_seconds"),
    Case("max-attempts-a-string", job_body(name="new", max_attempts="3"), "max_attempts"),
    Case("priority-10", job_body(name="new", priority=10), "priority"),
    Case("priority-negative", job_body(name="new", priority=-1), "priority"),
    Case("priority-a-string", job_body(name="new", priority="9"), "priority"),
    Case("priority-a-float", job_body(name="new", priority=9.5), "priority"),
    Case("patch-priority-null", {"priority": None}, "priority", method="patch", url="/api/v1/jobs/{job}/"),
    Case("misfire-policy-unknown", job_body(name="new", misfire_policy="sometimes"), "misfire_policy"),
    Case("overlap-policy-unknown", job_body(name="new", overlap_policy="queue"), "overlap_policy"),
    # targets
    Case("target-missing", {"name": "new", "schedule": {"every": 60}}, "target"),
    Case("target-kind-unknown", job_body(name="new", target={"kind": "shell", "cmd": "ls"}), "target.kind"),
    Case("target-task-not-allowed", job_body(name="new", target={"kind": "task", "task": "os.system"}), "target.task"),
    Case("target-unknown-field", job_body(name="new", target={**TASK, "taks": "x"}), "target.taks"),
    Case("target-args-not-a-list", job_body(name="new", target={**TASK, "args": {"a": 1}}), "target.args"),
    Case(
        "http-header-value-with-CRLF",
        job_body(
            name="new", target={"kind": "http", "url": "https://example.com/", "headers": {"X-A": "v\r\nInjected: 1"}}
        ),
        "target.headers.X-A",
    ),
    Case(
        "http-header-name-with-CRLF",
        job_body(
            name="new", target={"kind": "http", "url": "https://example.com/", "headers": {"X-A\r\nInjected": "v"}}
        ),
        "target.headers.X-A\r\nInjected",
    ),
    Case(
        "http-header-name-with-a-space",
        job_body(name="new", target={**HTTP, "headers": {"X A": "v"}}),
        "target.headers.X A",
    ),
    Case(
        "http-header-name-with-a-colon",
        job_body(name="new", target={**HTTP, "headers": {"X-A:": "v"}}),
        "target.headers.X-A:",
    ),
    Case("http-header-name-empty", job_body(name="new", target={**HTTP, "headers": {"": "v"}}), "target.headers"),
    Case(
        "http-header-name-non-ASCII",
        job_body(name="new", target={**HTTP, "headers": {"X-\u00c4": "v"}}),
        "target.headers.X-\u00c4",
    ),
    Case(
        "http-header-value-not-latin-1",
        job_body(name="new", target={**HTTP, "headers": {"X-A": "5 \u20ac"}}),
        "target.headers.X-A",
    ),
    Case(
        "http-header-value-with-a-control-character",
        job_body(name="new", target={**HTTP, "headers": {"X-A": "a\u0007"}}),
        "target.headers.X-A",
    ),
    Case(
        "http-header-value-with-a-C1-control",
        job_body(name="new", target={**HTTP, "headers": {"X-A": "a\u0085"}}),
        "target.headers.X-A",
    ),
    Case(
        "http-reserved-header",
        job_body(name="new", target={"kind": "http", "url": "https://example.com/", "headers": {"Host": "x"}}),
        "target.headers.Host",
    ),
    Case("http-file-url", job_body(name="new", target={"kind": "http", "url": "file:///etc/passwd"}), "target.url"),
    Case(
        "http-credentials-in-url",
        job_body(name="new", target={"kind": "http", "url": "https://u:p@example.com/"}),
        "target.url",
    ),
    Case(
        "http-non-ASCII-path",
        job_body(name="new", target={"kind": "http", "url": "https://example.com/caf\u00e9"}),
        "target.url",
    ),
    Case(
        "http-non-ASCII-query",
        job_body(name="new", target={"kind": "http", "url": "https://example.com/?q=\u00fc"}),
        "target.url",
    ),
    Case(
        "http-space-in-path",
        job_body(name="new", target={"kind": "http", "url": "https://example.com/a b"}),
        "target.url",
    ),
    Case(
        "http-stray-percent",
        job_body(name="new", target={"kind": "http", "url": "https://example.com/?off=50%"}),
        "target.url",
    ),
    Case(
        "patch-http-header-name-with-a-space",
        {"target": {**HTTP, "headers": {"X A": "v"}}},
        "target.headers.X A",
        method="patch",
        url="/api/v1/jobs/{job}/",
    ),
    Case(
        "http-method-unknown",
        job_body(name="new", target={"kind": "http", "method": "TRACE", "url": "https://example.com/"}),
        "target.method",
    ),
    Case("command-not-configured", job_body(name="new", target={"kind": "command", "name": "rm"}), "target.name"),
    # PATCH: the job stays as it was
    Case(
        "patch-cron-never-fires",
        {"schedule": {"cron": "0 0 30 2 *"}},
        "schedule.cron",
        method="patch",
        url="/api/v1/jobs/{job}/",
    ),
    Case(
        "patch-every-NaN",
        raw('{"schedule": {"every": NaN}}'),
        "schedule.every",
        method="patch",
        url="/api/v1/jobs/{job}/",
    ),
    Case("patch-name-taken", {"name": "taken"}, "name", method="patch", url="/api/v1/jobs/{job}/"),
    Case("patch-unknown-field", {"enabled": False}, "enabled", method="patch", url="/api/v1/jobs/{job}/"),
    Case("patch-null-name", {"name": None}, "name", method="patch", url="/api/v1/jobs/{job}/"),
    Case(
        "impact-bad-zone",
        {"schedule": {"cron": "0 3 * * *", "timezone": "Nowhere/Land"}},
        "schedule.timezone",
        url="/api/v1/jobs/{job}/impact/",
    ),
    # actions
    Case("pause-note-too-long", {"note": "n" * 501}, "note", url="/api/v1/jobs/{job}/pause/"),
    Case("pause-note-with-bidi-override", {"note": "by \u202enimda"}, "note", url="/api/v1/jobs/{job}/pause/"),
    Case("pause-note-with-line-separator", {"note": "a\u2028b"}, "note", url="/api/v1/jobs/{job}/pause/"),
    Case("pause-note-with-newline", {"note": "a\nb"}, "note", url="/api/v1/jobs/{job}/pause/"),
    Case(
        "backfill-end-before-start",
        {"start": "2024-01-02T00:00:00Z", "end": "2024-01-01T00:00:00Z"},
        "end",
        url="/api/v1/jobs/{job}/backfill/",
    ),
    Case(
        "backfill-naive-start",
        {"start": "2024-01-01T00:00:00", "end": "2024-01-02T00:00:00Z"},
        "start",
        url="/api/v1/jobs/{job}/backfill/",
    ),
    Case(
        "backfill-full-width-start",
        {"start": "\uff12\uff10\uff12\uff14-01-01T00:00:00Z", "end": "2024-01-02T00:00:00Z", "dry_run": False},
        "start",
        url="/api/v1/jobs/{job}/backfill/",
    ),
    Case(
        "backfill-full-width-end",
        {"start": "2024-01-01T00:00:00Z", "end": "2024-01-0\uff12T00:00:00Z", "dry_run": False},
        "end",
        url="/api/v1/jobs/{job}/backfill/",
    ),
    Case(
        "backfill-in-the-future",
        {"start": "2024-01-01T00:00:00Z", "end": "2100-01-01T00:00:00Z", "dry_run": False},
        "end",
        url="/api/v1/jobs/{job}/backfill/",
    ),
    Case(
        "backfill-dry-run-a-string",
        {"start": "2024-01-01T00:00:00Z", "end": "2024-01-02T00:00:00Z", "dry_run": "yes"},
        "dry_run",
        url="/api/v1/jobs/{job}/backfill/",
    ),
    Case("bulk-unknown-action", {"tag": "t", "action": "explode"}, "action", url="/api/v1/jobs/bulk/"),
    Case("bulk-blank-tag", {"tag": "", "action": "pause"}, "tag", url="/api/v1/jobs/bulk/"),
    Case(
        "bulk-note-with-bidi-override",
        {"tag": "t", "action": "pause", "note": "\u2067x"},
        "note",
        url="/api/v1/jobs/bulk/",
    ),
    Case("preview-count-0", {"schedule": {"every": 60}, "count": 0}, "count", url="/api/v1/preview/"),
    Case(
        "preview-full-width-start",
        {"schedule": {"every": 60}, "start_at": "\uff12\uff10\uff13\uff10-01-01T00:00:00Z"},
        "start_at",
        url="/api/v1/preview/",
    ),
    Case("preview-never-fires", {"schedule": {"cron": "0 0 31 2 *"}}, "schedule.cron", url="/api/v1/preview/"),
    Case("key-name-blank", {"name": ""}, "name", url="/api/v1/keys/"),
    Case("key-name-with-NUL", {"name": "a\u0000"}, "name", url="/api/v1/keys/"),
    Case(
        "key-over-the-tenants-cap",
        {"name": "one more"},
        "tenant",
        403,
        url="/api/v1/keys/",
        settings=(("CRONFLEET_MAX_API_KEYS_PER_TENANT", 1),),
    ),  # the caller's own key is the one
    Case("key-name-with-line-separator", {"name": "deploy\u2028admin"}, "name", url="/api/v1/keys/"),
    # queries
    Case("runs-of-another-tenants-job", None, "job", method="get", url="/api/v1/runs/?job={other_job}"),
    Case("runs-job-not-a-number", None, "job", method="get", url="/api/v1/runs/?job=abc"),
    Case("runs-job-beyond-int64", None, "job", method="get", url="/api/v1/runs/?job=99999999999999999999999"),
    Case("runs-state-unknown", None, "state", method="get", url="/api/v1/runs/?state=exploded"),
    Case(
        "runs-naive-after",
        None,
        "scheduled_after",
        method="get",
        url="/api/v1/runs/?scheduled_after=2024-01-01T00:00:00",
    ),
    Case(
        "runs-full-width-after",
        None,
        "scheduled_after",
        method="get",
        url="/api/v1/runs/?scheduled_after=" + quote("\uff12\uff10\uff12\uff14-01-01T00:00:00Z"),
    ),
    Case("runs-limit-0", None, "limit", method="get", url="/api/v1/runs/?limit=0"),
    Case("runs-limit-501", None, "limit", method="get", url="/api/v1/runs/?limit=501"),
    Case("runs-limit-huge", None, "limit", method="get", url="/api/v1/runs/?limit=" + "9" * 5000),
    Case("runs-cursor-garbage", None, "cursor", method="get", url="/api/v1/runs/?cursor=not-a-cursor"),
    Case("runs-cursor-of-the-wrong-types", None, "cursor", method="get", url="/api/v1/runs/?cursor=WzEsIDJd"),
    Case("jobs-cursor-negative", None, "cursor", method="get", url="/api/v1/jobs/?cursor=Wy0xXQ"),
    Case("preview-count-101", None, "count", method="get", url="/api/v1/jobs/{job}/preview/?count=101"),
    Case("stats-window-too-short", None, "window", method="get", url="/api/v1/stats/?window=59"),
    Case("stats-window-a-word", None, "window", method="get", url="/api/v1/stats/?window=hour"),
    # a misspelt query parameter is named, not ignored (which would list everything)
    Case("runs-misspelt-filter", None, "stat", method="get", url="/api/v1/runs/?stat=dead"),
    Case("jobs-misspelt-filter", None, "tags", method="get", url="/api/v1/jobs/?tags=billing&limit=5"),
    Case("keys-unknown-parameter", None, "revoked", method="get", url="/api/v1/keys/?revoked=true"),
    Case("preview-unknown-parameter", None, "n", method="get", url="/api/v1/jobs/{job}/preview/?n=3"),
    Case("stats-unknown-parameter", None, "since", method="get", url="/api/v1/stats/?since=2024-01-01"),
]


@pytest.fixture
def setup(db):
    tenant = make_tenant()
    job = services.job_create(
        tenant,
        services.JobSpec(name="existing", task_name="scheduler_app.echo", cron="0 3 * * *", timezone="Europe/Paris"),
    )
    services.job_create(tenant, services.JobSpec(name="taken", task_name="scheduler_app.echo", every=60))
    other = services.job_create(make_tenant(), services.JobSpec(name="other", task_name="scheduler_app.echo", every=60))
    return {"api": client_for(tenant), "job": job, "other_job": other}


def everything() -> list:
    """Every row a request could write (a key's last_used_at aside: using a key sets it)."""
    return [
        *(list(model.objects.order_by("pk").values()) for model in (Tenant, Job, JobRun, AuditEvent)),
        list(ApiKey.objects.order_by("pk").values("id", "tenant", "name", "prefix", "revoked_at")),
    ]


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_bad_input_is_refused_naming_the_field_and_writes_nothing(setup, settings, case):
    api: APIClient = setup["api"]
    url = case.url.format(job=setup["job"].id, other_job=setup["other_job"].id)
    for name, value in case.settings:
        setattr(settings, name, value)
    before = everything()

    if case.body is None:
        response = getattr(api, case.method)(url)
    else:
        data = case.body if isinstance(case.body, bytes) else json.dumps(case.body).encode()
        response = api.generic(case.method.upper(), url, data, content_type=case.content_type)

    assert response.status_code == case.status, response.content[:500]
    errors = errors_of(response)
    assert next(iter(errors)) == case.field, errors
    assert all(message for message in errors.values())
    assert everything() == before


def test_an_error_names_every_bad_field_at_once(setup):
    response = setup["api"].post(
        "/api/v1/jobs/",
        {"name": "new", "schedule": {"every": "60"}, "target": {"kind": "task"}, "max_attempts": -1},
        format="json",
    )

    assert response.status_code == 400
    assert set(errors_of(response)) == {"schedule.every", "target.task", "max_attempts"}


def test_an_at_just_inside_the_grace_is_accepted(setup):
    at = (db_now() - timedelta(minutes=1)).isoformat()

    response = setup["api"].post("/api/v1/jobs/", job_body(name="late", schedule={"at": at}), format="json")

    assert response.status_code == 201, response.json()


def test_unknown_routes_under_the_api_answer_json_404(setup):
    response = setup["api"].get("/api/v1/jobs/1.5/")

    assert response.status_code == 404
    assert list(errors_of(response)) == ["path"]


def test_a_description_keeps_tabs_and_line_feeds_and_an_emoji_sequence_and_stores_crlf_as_lf(setup):
    body = job_body(name="described", description="Steps:\r\n\t1. run\n\t2. \U0001f468\u200d\U0001f469 check")

    response = setup["api"].post("/api/v1/jobs/", body, format="json")

    assert response.status_code == 201, response.json()
    assert response.json()["description"] == "Steps:\n\t1. run\n\t2. \U0001f468\u200d\U0001f469 check"


def test_repeated_tags_are_kept_once_in_their_first_order(setup):
    body = job_body(name="tagged", tags=["nightly", "billing", "nightly", " billing ", "eu"])

    created = setup["api"].post("/api/v1/jobs/", body, format="json")
    patched = setup["api"].patch(f"/api/v1/jobs/{setup['job'].id}/", {"tags": ["b", "a", "b"]}, format="json")

    assert created.status_code == 201, created.json()
    assert created.json()["tags"] == ["nightly", "billing", "eu"]
    assert Job.objects.get(name="tagged").tags == ["nightly", "billing", "eu"]
    assert patched.json()["tags"] == ["b", "a"]


def test_an_end_that_has_passed_since_does_not_block_other_edits(setup):
    job = setup["job"]
    Job.objects.filter(id=job.id).update(end_at=db_now() - timedelta(days=1))  # the job ended yesterday

    renamed = setup["api"].patch(f"/api/v1/jobs/{job.id}/", {"name": "renamed"}, format="json")
    reopened = setup["api"].patch(f"/api/v1/jobs/{job.id}/", {"end_at": None}, format="json")

    assert renamed.status_code == 200, renamed.json()
    assert reopened.status_code == 200, reopened.json()
    assert reopened.json()["end_at"] is None and reopened.json()["next_run_at"] is not None
