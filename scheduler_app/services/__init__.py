"""Writes used by the commands, the admin and the API, one module per noun:

- jobspec: what a user states about a job (JobSpec) and its validation;
- jobs: create, pause, resume, trigger, delete, bulk actions by tag;
- edits: editing a job (planned and validated as a whole, its impact previewed), previews;
- runs: backfill and replay (runs written outside the beat);
- tenants: tenants, their quotas and signing secrets;
- keys: API keys;
- common: the quota error, the audit row of a job change, waking the beats, admission.

Services validate their input (raising InvalidInput naming the field, before anything is
written; the pure checks of what people write are in validation.py), compute next_run_at
with the schedules package, write in one transaction, audit the change and wake sleeping beats.
Nothing else computes schedules. Callers use the names below (`services.job_create(...)`);
a test that replaces a name the services look up (publish_runs, say) patches it in the module
that uses it.
"""

from scheduler_app.services.common import (
    WAKE_CHANNEL,
    QuotaExceeded,
    admission_fields,
    admitted,
    wake_beats,
)
from scheduler_app.services.edits import (
    MAX_PREVIEW,
    Edit,
    check_count,
    job_preview,
    job_spec_of,
    job_update,
    job_update_impact,
    plan_edit,
    schedule_preview,
    upcoming_fires,
)
from scheduler_app.services.jobs import (
    BULK_ACTIONS,
    first_fire,
    job_create,
    job_delete,
    job_pause,
    job_resume,
    job_trigger,
    job_trigger_reporting,
    jobs_bulk,
    record_skipped,
    skip_due_fires,
)
from scheduler_app.services.jobspec import (
    HTTP_METHODS,
    MAX_ATTEMPTS,
    PAST_GRACE,
    JobSpec,
    check_job_quota,
    check_min_interval,
    spec_schedule,
    validate_http,
    validate_spec,
    validate_target,
)
from scheduler_app.services.keys import (
    API_KEY_PATTERN,
    apikey_authenticate,
    apikey_create,
    apikey_revoke,
    check_key_quota,
)
from scheduler_app.services.runs import REPLAYABLE, job_backfill, run_replay
from scheduler_app.services.tenants import (
    TENANT_LIMITS,
    tenant_by_slug,
    tenant_create,
    tenant_rotate_webhook_secret,
    tenant_signing_secrets,
    tenant_update,
    write_tenant_changes,
)
from scheduler_app.validation import InvalidInput, check_name

__all__ = [
    "API_KEY_PATTERN", "BULK_ACTIONS", "HTTP_METHODS", "MAX_ATTEMPTS", "MAX_PREVIEW", "PAST_GRACE", "REPLAYABLE",
    "TENANT_LIMITS", "WAKE_CHANNEL", "Edit", "InvalidInput", "JobSpec", "QuotaExceeded", "admission_fields",
    "admitted", "apikey_authenticate", "apikey_create", "apikey_revoke", "check_count", "check_job_quota",
    "check_key_quota", "check_min_interval", "check_name", "first_fire", "job_backfill", "job_create", "job_delete",
    "job_pause", "job_preview", "job_resume", "job_spec_of", "job_trigger", "job_trigger_reporting",
    "job_update", "job_update_impact", "jobs_bulk", "plan_edit", "record_skipped", "run_replay",
    "schedule_preview", "skip_due_fires", "spec_schedule", "tenant_by_slug", "tenant_create",
    "tenant_rotate_webhook_secret", "tenant_signing_secrets", "tenant_update", "upcoming_fires",
    "validate_http", "validate_spec", "validate_target", "wake_beats", "write_tenant_changes",
]
