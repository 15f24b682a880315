"""Writes used by the commands, the admin and the API, one module per noun:

- jobspec: what a user states about a job (JobSpec) and its validation;
- jobs: create, pause, resume, trigger, delete, bulk actions by tag;
- edits: editing a job (planned and validated as a whole, its impact previewed), previews;
- runs: backfill and replay (runs written outside the beat);
- tenants: tenants, their quotas and signing secrets;
- keys: API keys;
- calendars: business-day calendars (a job's calendar and calendar policy checked);
- flexible: flexible windows (a job placed at its window's least loaded minute; rebalance);
- retention: a tenant's or a job's retention (a job's within its tenant's bound);
- importbeat: the import of django-celery-beat's periodic tasks;
- beatfields: what a beat source's schedule, zone and priority mean to Celery, as a job's;
- pauses: bulk pauses (a second person's approval over a threshold), the paused jobs;
- taskcalls: one call of a django.tasks task as a one-off job, its run recorded when due;
- common: the quota error, whole-number checks, admission.

Services validate their input (raising InvalidInput naming the field, before anything is
written; the pure checks of what people write are in validation.py), compute next_run_at
with the schedules package, write in one transaction, audit the change and wake sleeping beats.
Nothing else computes schedules. Callers use the names below (`services.job_create(...)`);
a test that replaces a name the services look up (publish_runs, say) patches it in the module
that uses it.
"""

from scheduler_app.dispatch.waker import wake_beats
from scheduler_app.http.secrets import tenant_signing_secrets
from scheduler_app.models.lifecycle import job_pause
from scheduler_app.services.calendars import (
    calendar_create,
    calendar_delete,
    calendar_get,
    calendar_update,
    check_calendar_fields,
)
from scheduler_app.services.checkins import UnknownKey, canonical_key, monitored_job, ping_url, record_ping
from scheduler_app.services.common import QuotaExceeded
from scheduler_app.services.edits import (
    MAX_PREVIEW,
    check_managed,
    drift_warning,
    job_preview,
    job_update,
    job_update_impact,
    plan_edit,
    schedule_preview,
    upcoming_fires,
)
from scheduler_app.services.flexible import FLEX_SCOPES, jobs_rebalance, spec_placed
from scheduler_app.services.jobs import (
    BULK_ACTIONS,
    job_create,
    job_delete,
    job_resume,
    job_trigger,
    job_trigger_reporting,
    jobs_bulk,
)
from scheduler_app.services.jobspec import PAST_GRACE, JobSpec, lock_queues, spec_schedule, validate_spec
from scheduler_app.services.keys import apikey_authenticate, apikey_create, apikey_revoke, check_key_quota
from scheduler_app.services.pauses import (
    BulkPause,
    pause_bulk,
    pause_request_approve,
    pause_request_refuse,
    paused_jobs,
    pending_requests,
)
from scheduler_app.services.retention import (
    check_job_retention,
    clamp_all_jobs,
    job_set_retention,
    tenant_set_retention,
)
from scheduler_app.services.runs import REPLAYABLE, job_backfill, run_replay
from scheduler_app.services.taskcalls import task_call_record
from scheduler_app.services.tenantmove import tenant_export, tenant_import
from scheduler_app.services.tenants import (
    TENANT_LIMITS,
    tenant_by_slug,
    tenant_create,
    tenant_rotate_webhook_secret,
    tenant_update,
)
from scheduler_app.validation import InvalidInput, check_name

__all__ = [
    "UnknownKey",
    "canonical_key",
    "monitored_job",
    "ping_url",
    "record_ping",
    "calendar_create",
    "calendar_delete",
    "calendar_get",
    "calendar_update",
    "check_calendar_fields",
    "apikey_authenticate",
    "apikey_create",
    "apikey_revoke",
    "BULK_ACTIONS",
    "check_job_retention",
    "clamp_all_jobs",
    "check_key_quota",
    "check_managed",
    "check_name",
    "drift_warning",
    "InvalidInput",
    "job_backfill",
    "job_create",
    "job_delete",
    "job_pause",
    "BulkPause",
    "pause_bulk",
    "pause_request_approve",
    "pause_request_refuse",
    "paused_jobs",
    "pending_requests",
    "job_preview",
    "job_resume",
    "job_set_retention",
    "job_trigger",
    "job_trigger_reporting",
    "job_update",
    "job_update_impact",
    "FLEX_SCOPES",
    "jobs_bulk",
    "jobs_rebalance",
    "JobSpec",
    "spec_placed",
    "MAX_PREVIEW",
    "PAST_GRACE",
    "plan_edit",
    "QuotaExceeded",
    "REPLAYABLE",
    "run_replay",
    "schedule_preview",
    "spec_schedule",
    "task_call_record",
    "tenant_by_slug",
    "tenant_create",
    "tenant_export",
    "tenant_import",
    "TENANT_LIMITS",
    "tenant_rotate_webhook_secret",
    "tenant_set_retention",
    "tenant_signing_secrets",
    "tenant_update",
    "upcoming_fires",
    "validate_spec",
    "lock_queues",
    "wake_beats",
]
