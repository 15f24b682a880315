"""The API's preview of a job with a calendar shows a moved fire with the calendar's reason
and without a DST flag (the schedules side is in tests/unit/schedules/test_calendar_preview.py)."""

from __future__ import annotations

from datetime import datetime

from rest_framework.test import APIClient

from scheduler_app import services
from tests.unit.schedules.test_calendar_preview import HOLIDAY


def test_the_api_preview_shows_the_moved_fire_with_its_reason_and_no_dst_flag(db):
    tenant = services.tenant_create(slug="acme", name="Acme", timezone="UTC")
    services.calendar_create(tenant, name="ops", extra_holidays={HOLIDAY.isoformat(): "Shutdown"})
    job = services.job_create(
        tenant,
        services.JobSpec(
            name="payroll",
            task_name="scheduler_app.echo",
            cron="0 18 28 * *",
            calendar="ops",
            calendar_policy="previous_business_day",
        ),
    )
    _, raw = services.apikey_create(tenant=tenant, name="k")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")

    fires = api.get(f"/api/v1/jobs/{job.id}/preview/?count=60").json()["fires"]

    # Five years of 28ths: those on a weekend (or the holiday) run on the Friday before.
    moved = [fire for fire in fires if fire["calendar"]]
    assert len(moved) >= 10 and all("moved from" in fire["calendar"] for fire in moved)
    assert all(datetime.fromisoformat(fire["utc"]).day < 28 for fire in moved)
    assert all(fire["anomaly"] is None for fire in fires)
