"""Per-tenant dispatch quotas: fires per minute and concurrent runs, enforced at dispatch,
against the real PostgreSQL (the budget and the plan alone: the unit tier's test_quotas; a
real beat and worker: the system tier's).

A fire over its tenant's budget is never dropped: it is recorded as `pending` with a reason
starting with "quota_" and queued, oldest first, when the budget frees. Everything is
counted from the ledger (dispatched_at: a run's first trip to the broker).
"""

import threading
from datetime import timedelta

import pytest
from django.db import connection, connections, transaction
from django.db.transaction import TransactionManagementError

from scheduler_app import dispatch
from scheduler_app.dispatch.publish import RunMessage
from scheduler_app.models import JobRun, RunState, Tenant, db_now
from scheduler_app.worker import execution
from tests.conftest import wait_for
from tests.unit.dispatch.test_quotas import CONCURRENCY, FIRES, T

GRACE = timedelta(seconds=60)


@pytest.fixture
def published(monkeypatch):
    """Every message the beat would publish, instead of sending it to the broker."""
    sent: list[RunMessage] = []

    def capture(messages):
        messages = list(messages)
        sent.extend(messages)
        return len(messages)

    monkeypatch.setattr(dispatch.turn, "publish_runs", capture)
    return sent


def make_tenant(slug, **quota) -> Tenant:
    return Tenant.objects.create(slug=slug, name=slug, **quota)


def one_offs(make_job, tenant, count, at=T, spread=timedelta(0), **fields):
    """`count` one-off jobs of `tenant`, the i-th due at `at - (count - 1 - i) * spread`."""
    jobs = []
    for i in range(count):
        due = at - (count - 1 - i) * spread
        jobs.append(make_job(tenant=tenant, cron="", run_at=due, next_run_at=due, **fields))
    return jobs


def turn(now, batch=100):
    # sweep=False: publishing stale runs again is another story (and asks the broker)
    return dispatch.run_turn(now, batch_size=batch, grace=GRACE, sweep=False)


def runs_of(tenant):
    return JobRun.objects.filter(tenant=tenant).order_by("scheduled_at", "job_id")


def most_in_a_minute(times) -> int:
    """The most of `times` inside any 60-second window [t, t + 60 s)."""
    times = sorted(times)
    return max((sum(1 for u in times if t <= u < t + timedelta(seconds=60)) for t in times), default=0)


# --- dispatched_at --------------------------------------------------------------------------


def test_every_run_sent_to_the_broker_for_the_first_time_records_when(make_job, published):
    job = make_job(cron="", run_at=T, next_run_at=T)

    turn(T)

    run = JobRun.objects.get(job=job)
    assert (run.state, run.enqueued_at, run.dispatched_at) == ("queued", T, T)


def test_a_retry_and_a_released_buffered_run_keep_their_first_dispatch(make_job, make_run):
    earlier = T - timedelta(minutes=5)
    retry = make_run(state=RunState.RETRYING, next_attempt_at=T, dispatched_at=earlier, enqueued_at=earlier)
    buffered = make_run(
        make_job(overlap_policy="buffer_one"),
        state=RunState.PENDING,
        reason="overlap_buffered: waiting for run 1 still running",
        dispatched_at=earlier,
    )
    fresh = make_run(
        make_job(overlap_policy="buffer_one"),
        state=RunState.PENDING,
        reason="overlap_buffered: waiting for run 2 still running",
    )

    dispatch.recovery.requeue_due_retries(T, limit=10)
    dispatch.recovery.release_buffered_runs(T, limit=10)

    for run in (retry, buffered, fresh):
        run.refresh_from_db()
    assert (retry.state, retry.attempt, retry.enqueued_at, retry.dispatched_at) == ("queued", 2, T, earlier)
    assert (buffered.state, buffered.enqueued_at, buffered.dispatched_at) == ("queued", T, earlier)
    assert (fresh.state, fresh.dispatched_at) == ("queued", T)


# --- fires per minute -----------------------------------------------------------------------


def test_fires_over_the_per_minute_quota_wait_and_go_out_as_the_minute_passes(make_job, published):
    a = make_tenant("quota-a", max_fires_per_minute=5)
    b = make_tenant("quota-b")
    one_offs(make_job, a, 20, spread=timedelta(seconds=1))  # due T-19s .. T: the oldest get the budget
    one_offs(make_job, b, 10)

    result = turn(T)

    assert JobRun.objects.filter(tenant=b, state="queued").count() == 10
    a_runs = list(runs_of(a))
    assert [r.state for r in a_runs] == ["queued"] * 5 + ["pending"] * 15
    assert all(r.dispatched_at == T for r in a_runs[:5])
    assert {(r.reason, r.dispatched_at, r.enqueued_at) for r in a_runs[5:]} == {(FIRES.format(5), None, None)}
    assert (result.claimed, result.held, len(published)) == (30, 15, 15)

    for seconds in (1, 30, 59.9):  # within the minute: nothing more goes out
        assert turn(T + timedelta(seconds=seconds)).released == 0
    assert runs_of(a).filter(state="queued").count() == 5

    released = turn(T + timedelta(seconds=61)).released

    assert released == 5
    now_out = runs_of(a).filter(dispatched_at=T + timedelta(seconds=61))
    assert [r.scheduled_at for r in now_out] == [r.scheduled_at for r in a_runs[5:10]]  # the next oldest
    assert {(r.state, r.reason, r.enqueued_at) for r in now_out} == {("queued", "", T + timedelta(seconds=61))}

    for minutes in (2, 3, 4):  # the rest, five a minute, then nothing left to do
        turn(T + timedelta(minutes=minutes, seconds=2))
    ledger = list(runs_of(a))
    assert len(ledger) == 20 and len({r.job_id for r in ledger}) == 20  # one run per fire, none lost
    assert all(r.dispatched_at is not None and r.state == "queued" for r in ledger)
    assert most_in_a_minute([r.dispatched_at for r in ledger]) == 5
    assert sorted(m.run_id for m in published) == sorted(JobRun.objects.values_list("id", flat=True))
    assert len({m.run_id for m in published}) == len(published)  # each run published once


def test_new_fires_wait_behind_older_held_runs(make_job, published):
    a = make_tenant("quota-a", max_fires_per_minute=5)
    for _ in range(10):
        make_job(tenant=a, every_seconds=60, anchor_at=T, next_run_at=T)

    turn(T)
    turn(T + timedelta(seconds=60))  # ten new fires; the budget of five goes to the older held runs

    states = list(runs_of(a).values_list("scheduled_at", "state"))
    assert states.count((T, "queued")) == 10
    assert states.count((T + timedelta(seconds=60), "pending")) == 10
    assert all(r.reason == FIRES.format(5) for r in runs_of(a).filter(state="pending"))


def test_retries_are_not_throttled(make_job, make_run, published):
    a = make_tenant("quota-a", max_fires_per_minute=1)
    make_run(make_job(tenant=a), dispatched_at=T)  # the minute's budget is spent
    retry = make_run(
        make_job(tenant=a), state=RunState.RETRYING, next_attempt_at=T, dispatched_at=T - timedelta(seconds=30)
    )

    turn(T + timedelta(seconds=1))

    retry.refresh_from_db()
    assert (retry.state, retry.attempt, retry.dispatched_at) == ("queued", 2, T - timedelta(seconds=30))


# --- concurrent runs ------------------------------------------------------------------------


def test_concurrent_runs_quota_releases_one_run_per_finished_one(make_job, published):
    a = make_tenant("quota-a", max_concurrent_runs=2)
    one_offs(make_job, a, 5, spread=timedelta(seconds=1))

    turn(T)

    assert list(runs_of(a).values_list("state", flat=True)) == ["queued"] * 2 + ["pending"] * 3
    assert set(runs_of(a).filter(state="pending").values_list("reason", flat=True)) == {CONCURRENCY.format(2)}
    assert turn(T + timedelta(seconds=1)).released == 0

    first = runs_of(a).first()
    JobRun.objects.filter(id=first.id).update(state=RunState.SUCCEEDED)  # a running one counts as well
    JobRun.objects.filter(id=runs_of(a)[1].id).update(state=RunState.RUNNING)

    assert turn(T + timedelta(seconds=2)).released == 1
    assert list(runs_of(a).values_list("state", flat=True)) == ["succeeded", "running", "queued", "pending", "pending"]
    assert turn(T + timedelta(seconds=3)).released == 0


def test_a_tenant_whose_quota_was_removed_gets_its_held_runs_queued(make_job, published):
    a = make_tenant("quota-a", max_fires_per_minute=1)
    one_offs(make_job, a, 3)
    turn(T)
    Tenant.objects.filter(id=a.id).update(max_fires_per_minute=None)

    assert turn(T + timedelta(seconds=1)).released == 2
    assert set(runs_of(a).values_list("state", flat=True)) == {"queued"}


# --- quotas and overlap policies ------------------------------------------------------------


def test_a_buffered_run_of_a_tenant_over_budget_waits_for_the_quota(make_job, published):
    a = make_tenant("quota-a", max_fires_per_minute=1)
    job = make_job(tenant=a, every_seconds=10, anchor_at=T, next_run_at=T, overlap_policy="buffer_one")
    turn(T)
    turn(T + timedelta(seconds=10))
    first, held = runs_of(a)
    assert (first.state, held.state) == ("queued", "pending") and held.reason.startswith("overlap_buffered")

    assert execution.execute_run(first.id, 1, worker="w").state == "succeeded"
    turn(T + timedelta(seconds=11))  # the job is idle, but a fire went out less than a minute ago

    held.refresh_from_db()
    assert (held.state, held.reason, held.dispatched_at) == ("pending", FIRES.format(1), None)
    turn(T + timedelta(seconds=20))  # the next fire: the held run is the job's next run, so it is skipped
    assert JobRun.objects.get(job=job, scheduled_at=T + timedelta(seconds=20)).reason.startswith("overlap_buffered")

    turn(T + timedelta(seconds=61))

    held.refresh_from_db()
    assert (held.state, held.dispatched_at) == ("queued", T + timedelta(seconds=61))
    assert JobRun.objects.get(job=job, scheduled_at=T + timedelta(seconds=20)).state == "pending"  # still buffered


def test_a_skip_job_does_not_queue_a_second_run_while_its_first_waits_for_the_quota(make_job, published):
    a = make_tenant("quota-a", max_fires_per_minute=1)
    make_job(tenant=a, cron="", run_at=T, next_run_at=T)  # spends the minute's fire
    job = make_job(
        tenant=a,
        every_seconds=10,
        anchor_at=T + timedelta(seconds=1),
        next_run_at=T + timedelta(seconds=1),
        overlap_policy="skip",
    )

    turn(T + timedelta(seconds=1))
    turn(T + timedelta(seconds=11))

    waiting = JobRun.objects.get(job=job, scheduled_at=T + timedelta(seconds=1))
    second = JobRun.objects.get(job=job, scheduled_at=T + timedelta(seconds=11))
    assert (waiting.state, waiting.reason) == ("pending", FIRES.format(1))
    assert (second.state, second.reason) == (
        "skipped",
        f"overlap_skip: run {waiting.id} still waiting for its tenant's quota",
    )


def test_release_buffered_runs_leaves_runs_held_by_a_quota_alone(make_job, make_run):
    plain = make_tenant("plain")  # no quota (any more): still, only the buffer's runs are its business
    held = make_run(make_job(tenant=plain, overlap_policy="buffer_one"), state=RunState.PENDING, reason=FIRES.format(3))

    assert dispatch.recovery.release_buffered_runs(T, limit=10) == []
    held.refresh_from_db()
    assert held.state == "pending"


# --- the beat's sleep and the services' entry -----------------------------------------------


def test_the_beat_sleeps_briefly_while_runs_wait_for_a_quota(make_job, make_run):
    job = make_job(next_run_at=T + timedelta(hours=1))
    make_run(job, state=RunState.PENDING, reason="overlap_buffered: waiting", scheduled_at=T)

    assert dispatch.seconds_until_due(T, cap=5) == 5

    make_run(job, state=RunState.PENDING, reason=FIRES.format(3), scheduled_at=T - timedelta(minutes=1))

    assert dispatch.seconds_until_due(T, cap=5) == dispatch.quotas.QUOTA_POLL_SECONDS


def test_tenant_budget_for_manual_triggers(make_job, make_run):
    a = make_tenant("quota-a", max_fires_per_minute=3, max_concurrent_runs=10)
    make_run(make_job(tenant=a), dispatched_at=T - timedelta(seconds=30))
    make_run(make_job(tenant=a), dispatched_at=T - timedelta(seconds=90), state=RunState.SUCCEEDED)

    with transaction.atomic():
        budget = dispatch.tenant_budget(a.id, T)
        assert dispatch.tenant_budget(make_tenant("plain").id, T) is None

    assert (budget.available, budget.for_new_runs, budget.reason) == (2, 2, FIRES.format(3))


@pytest.mark.django_db(transaction=True)
def test_tenant_budget_holds_the_tenant_row_until_commit():
    a = make_tenant("quota-a", max_fires_per_minute=3)
    with pytest.raises(TransactionManagementError):
        dispatch.tenant_budget(a.id, db_now())  # outside a transaction the lock would end at once
    other = connections.create_connection("default")
    try:
        with transaction.atomic():
            dispatch.tenant_budget(a.id, db_now())
            with other.cursor() as cursor:
                cursor.execute("SET lock_timeout = '200ms'")
                with pytest.raises(Exception, match="lock"):
                    cursor.execute("SELECT id FROM scheduler_app_tenant WHERE id = %s FOR NO KEY UPDATE", [a.id])
    finally:
        other.close()


# --- two beats at once ----------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_two_beats_at_once_never_spend_one_budget_twice(make_job, published, monkeypatch):
    a = make_tenant("quota-a", max_fires_per_minute=5)
    one_offs(make_job, a, 40)
    # The first beat to lock the tenant holds it until the other beat is seen waiting for
    # that lock, so both beats really meet at the budget (without the lock, both would see
    # five fires left).
    real_budgets = dispatch.quotas.tenant_budgets
    contended = threading.Event()

    def lock_waiters() -> int:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
            return cursor.fetchone()[0]

    def meeting_budgets(tenant_ids, now):
        budgets = real_budgets(tenant_ids, now)
        if budgets and not contended.is_set():
            try:
                wait_for(lock_waiters, timeout=5, interval=0.02, what="the other beat to wait for the tenant")
                contended.set()
            except AssertionError:
                pass  # the counts below tell what happened
        return budgets

    monkeypatch.setattr(dispatch.turn, "tenant_budgets", meeting_budgets)
    start = threading.Barrier(2)
    results: dict[str, list] = {"beat-1": [], "beat-2": []}
    errors = []

    def beat(name):
        try:
            start.wait(timeout=10)
            for now in (T, T, T + timedelta(seconds=1), T + timedelta(seconds=61), T + timedelta(seconds=62)):
                results[name].append(turn(now, batch=8))
        except Exception as exc:  # reported below, in the test's thread
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=beat, args=(name,)) for name in results]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert not errors, errors
    assert contended.is_set()  # one beat waited for the other's tenant lock
    assert all(result.claimed for result in results["beat-1"][:1] + results["beat-2"][:1])  # both dispatched
    ledger = list(runs_of(a))
    assert len(ledger) == 40 and len({(r.job_id, r.scheduled_at) for r in ledger}) == 40  # duplicates: 0
    out = [r.dispatched_at for r in ledger if r.dispatched_at is not None]
    assert len(out) == 10  # five in the first minute, five in the next
    assert most_in_a_minute(out) == 5
    assert len(published) == 10 and len({m.run_id for m in published}) == 10  # each published once
    assert {r.reason for r in ledger if r.state == "pending"} == {FIRES.format(5)}
