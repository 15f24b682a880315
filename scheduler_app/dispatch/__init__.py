"""The beat: claim due jobs, plan their fires, record the runs, publish them after commit.

turn.py is the loop body (run_turn, as named steps) over claim.py (which due jobs, fairly
by tenant), plan.py (what each fire becomes, its runs inserted and next_run_at advanced),
quotas.py (a tenant's budget), backpressure.py (a queue that is too deep), recovery.py
(retries, lost and stale runs) and vacuum.py (the job table's upkeep); publish.py hands the
runs to the broker after commit, observe.py reports a turn, waker.py ends a beat's sleep.
Statements are SQL text in sql.py.

The rest of the house calls the names below; runbeat drives the loop.
"""

from scheduler_app.dispatch.plan import run_times
from scheduler_app.dispatch.quotas import tenant_budget
from scheduler_app.dispatch.turn import TurnResult, beat_settings, dispatch_due_jobs, run_turn, seconds_until_due

__all__ = [
    "TurnResult",
    "beat_settings",
    "dispatch_due_jobs",
    "run_turn",
    "run_times",
    "seconds_until_due",
    "tenant_budget",
]
