"""The check-ins' statuses as a Prometheus gauge, read at each scrape of the web's /metrics:
cronfleet_checks{status} (new, up, late, down, paused; ledger/checkstatus.py), every status
named, zeros included, so an alert on `cronfleet_checks{status="down"} > 0` always has a series.
With CRONFLEET_METRICS_TENANT_LABELS also cronfleet_tenant_checks{tenant, status}, as the runs'
tenant counter is (labels stay bounded otherwise: never a job's name).

One statement over the monitored jobs (their latest check-in run as sub-selects).
"""

from __future__ import annotations

import logging
from collections import Counter

from django.db import DatabaseError
from prometheus_client.core import GaugeMetricFamily

from scheduler_app.conf import app_settings
from scheduler_app.ledger import checkstatus
from scheduler_app.models import db_now

logger = logging.getLogger(__name__)


class CheckCollector:
    def collect(self):
        try:
            now = db_now()
            jobs = checkstatus.with_check_fields(checkstatus.monitored()).select_related("tenant")
            tally: Counter[tuple[str, str]] = Counter()
            for job in jobs.only("id", "enabled", "target_kind", "tenant__slug").iterator(chunk_size=2000):
                tally[(job.tenant.slug, checkstatus.status_of(job, now) or checkstatus.NEW)] += 1
        except DatabaseError as exc:
            logger.warning("metrics: the check-ins were not read: %s", exc)
            return
        family = GaugeMetricFamily("cronfleet_checks", "Monitored jobs by check-in status", labels=["status"])
        for status in checkstatus.STATUSES:
            family.add_metric([status], sum(count for (_, found), count in tally.items() if found == status))
        yield family
        if app_settings.METRICS_TENANT_LABELS:
            by_tenant = GaugeMetricFamily(
                "cronfleet_tenant_checks", "cronfleet_checks by tenant", labels=["tenant", "status"]
            )
            for (slug, status), count in sorted(tally.items()):
                by_tenant.add_metric([slug, status], count)
            yield by_tenant
