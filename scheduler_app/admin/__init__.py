"""Admin for tenants, jobs, the run ledger, the audit trail and alerts: one module per noun.

Every write goes through scheduler_app.services, as the CLI's do:

- Tenants and jobs are created by services.tenant_create / services.job_create; the add
  forms check their input first (jobs with services.validate_spec) so mistakes come back
  as form errors naming the field, all of them at once (jobform.py, jobkinds.py).
- A job's change page saves through services.job_update (validated as a whole, version
  bumped, next_run_at recomputed when the schedule changes, the diff audited). Both job
  forms offer every target kind and schedule kind, showing the chosen kind's fields only.
  Pause, resume and trigger are changelist actions calling the services.
- A tenant's change page (name, zone, active flag, quotas, weight) saves through
  services.tenant_update. API keys are made by services.apikey_create: the key is shown
  once, in the confirmation message; afterwards only revoking is possible.
- Deleting a job calls services.job_delete (audited). Tenants are not deleted here.
- Runs and audit events are read-only records; fleet objectives are declared and removed,
  never edited (objectives.py).
- The login form is throttled per username and address (login.py).

The ledger and the audit trail grow to millions of rows: their lists never count the
whole table next to the filtered count (show_full_result_count = False), never compute
facet counts, show foreign keys as raw ids, and the action filter lists known actions
instead of asking the table for its distinct values.

Datetimes show with seconds and their zone everywhere (scheduler_app/formats).

The admin site itself is the project's: these modules register Cronfleet's models on it and
change nothing else (its names, its index, other apps' models). The dashboard (dashboard.py)
is a page of the app's URLs (scheduler_app/urls.py) served inside the site's chrome, linked
from the app's section (templates/admin/scheduler_app/app_index.html). Cronfleet's own
deployment names the site after itself in project/admin.py.
"""

from scheduler_app.admin import (  # noqa: F401 (registers the models)
    alerts,
    apikeys,
    audit,
    calendars,
    jobs,
    login,
    nodes,
    objectives,
    pauses,
    runs,
    tenants,
    windows,
)
