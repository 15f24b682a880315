"""Beat side: turn due jobs into runs and hand them to Celery.

Several beats may run at once, with no leader: due jobs are claimed with
SELECT ... FOR NO KEY UPDATE SKIP LOCKED, and JobRun is unique per (job, scheduled_at).
One short transaction claims a batch, plans its fires (pure code), inserts the runs and
advances next_run_at, with no broker call while rows are locked; publishing happens
after commit. Work per turn is O(due), never O(jobs).

Fairness and quotas: jobs are claimed in a per-tenant round robin weighted by
Tenant.weight (FAIR_CLAIM). A tenant with a dispatch quota (fires per minute, concurrent
runs) has its row locked while its budget is spent, so beats serialise per quota tenant;
fires over the budget are never dropped: they are recorded as `pending` with a reason
starting with "quota_" and queued, oldest first, as the budget frees
(release_quota_held_runs).

The steps live in modules of their own: claim (FAIR_CLAIM, FairOrder), plan (fires, overlap,
insert_runs, advance_jobs), quotas, recovery (lost, retries, stale, buffered releases),
backpressure, and turn (run_turn). This package re-exports the names callers use, so
`from scheduler_app import dispatch; dispatch.run_turn(...)` keeps working. A test that
replaces a name (monkeypatch) must replace it in the module that looks it up.
"""

from scheduler_app.dispatch.backpressure import (
    BACKPRESSURE_POLL_MAX_SECONDS,
    BACKPRESSURE_POLL_SECONDS,
    Backpressure,
    forget_backpressure,
)
from scheduler_app.dispatch.claim import (
    CLAIM_COLUMNS,
    CLAIM_FIELDS,
    FAIR_ORDER_BATCHES,
    FAIR_ORDER_COST_FACTOR,
    FAIR_ORDER_SECONDS,
    FairOrder,
    claim_due_jobs,
    claim_listed_sql,
    fair_claim_sql,
    forget_fair_order,
    hold_back_clause,
    job_dicts,
)
from scheduler_app.dispatch.common import (
    CONCURRENCY_REASON,
    FIRES_REASON,
    QUOTA_HELD_LABEL,
    QUOTA_PREFIX,
    lock_clause,
    messages_for,
    tenant_lock_clause,
)
from scheduler_app.dispatch.plan import (
    OverlapPlan,
    RunRow,
    active_runs,
    advance_jobs,
    cancel_runs,
    insert_runs,
    plan_batch,
    plan_overlap,
    revoke_running,
    run_times,
)
from scheduler_app.dispatch.quotas import (
    QUOTA_POLL_SECONDS,
    QUOTA_WINDOW,
    Budget,
    budget_of,
    hold_over_budget,
    release_quota_held_runs,
    tenant_budget,
    tenant_budgets,
)
from scheduler_app.dispatch.recovery import (
    mark_lost_runs,
    release_buffered_runs,
    republish_stale_runs,
    requeue_due_retries,
)
from scheduler_app.dispatch.turn import (
    Dispatched,
    TurnResult,
    beat_settings,
    dispatch_due_jobs,
    run_turn,
    run_turn_now,
    seconds_until_due,
)

__all__ = [
    "BACKPRESSURE_POLL_MAX_SECONDS", "BACKPRESSURE_POLL_SECONDS", "CLAIM_COLUMNS", "CLAIM_FIELDS",
    "CONCURRENCY_REASON", "FAIR_ORDER_BATCHES", "FAIR_ORDER_COST_FACTOR", "FAIR_ORDER_SECONDS",
    "FIRES_REASON", "QUOTA_HELD_LABEL", "QUOTA_POLL_SECONDS", "QUOTA_PREFIX", "QUOTA_WINDOW",
    "Backpressure", "Budget", "Dispatched", "FairOrder", "OverlapPlan", "RunRow", "TurnResult",
    "active_runs", "advance_jobs", "beat_settings", "budget_of", "cancel_runs", "claim_due_jobs",
    "claim_listed_sql", "dispatch_due_jobs", "fair_claim_sql", "forget_backpressure",
    "forget_fair_order", "hold_back_clause", "hold_over_budget", "insert_runs", "job_dicts",
    "lock_clause", "mark_lost_runs", "messages_for", "plan_batch", "plan_overlap",
    "release_buffered_runs", "release_quota_held_runs", "republish_stale_runs",
    "requeue_due_retries", "revoke_running", "run_times", "run_turn", "run_turn_now",
    "seconds_until_due", "tenant_budget", "tenant_budgets", "tenant_lock_clause",
]
