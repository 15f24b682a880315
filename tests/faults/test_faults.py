"""The fault suite: real beats, workers, PostgreSQL and Redis, one fault per scenario.

Run it alone with `./test.sh tests/faults -s` (each scenario prints its row of the table).
Every scenario asserts, from the receiver's log and the ledger: no fire lost, no phantom
fire, one effect per fire key (raw duplicates only where a worker is killed or frozen
mid-run, and then with a higher attempt), nothing left unfinished, and bounded lag.
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.db.models import Sum

from scheduler_app.dispatch.publish import RunMessage, publish_runs
from scheduler_app.models import JobRun, RunState, db_now
from scheduler_app.queues import queue_depths
from tests.conftest import wait_for
from tests.faults.harness import CLUSTER_ENV, FAULT_LAG_BOUND, flush_broker

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.faults]

WINDOW = 12  # seconds of load per scenario
LEASE_SECONDS = float(CLUSTER_ENV["CRONFLEET_LEASE_SECONDS"])


def assert_clean(report):
    assert not report.problems, "\n".join(report.problems[:20])
    assert report.delivered > 0


def assert_taken_over(report):
    """The fault cost some attempt its run: marked lost and run again as a later attempt."""
    assert report.lost > 0 and report.reattempted > 0, (report.lost, report.reattempted)


def holds_a_run(cluster, name: str) -> bool:
    return JobRun.objects.filter(tenant=cluster.tenant, state=RunState.RUNNING, worker__startswith=f"{name}-").exists()


def wait_for_a_run_held_by(cluster, name: str) -> None:
    """Until worker `name` is running a run: a fault that lands between its runs costs none."""
    wait_for(lambda: holds_a_run(cluster, name), timeout=30, interval=0.02, what=f"{name} to start a run")


def freeze_holding_a_run(cluster, victim, name: str, *, tries: int = 5) -> None:
    """SIGSTOP worker `name` at a moment it holds a run. A run it was seen holding may end
    before the signal lands; once it is stopped, what it holds can no longer change, so
    the check after the signal is the one that counts, and a miss wakes it to try again."""
    for _ in range(tries):
        wait_for_a_run_held_by(cluster, name)
        cluster.kill(victim, signal.SIGSTOP)
        if holds_a_run(cluster, name):
            return
        cluster.kill(victim, signal.SIGCONT)
    raise AssertionError(f"{name} held no run at any of {tries} stops")


def test_no_fault(cluster):
    cluster.seed()
    cluster.start()

    cluster.run_until(WINDOW)
    cluster.finish()

    report = cluster.check("no fault")
    assert_clean(report)
    assert report.raw_duplicates == 0 and not report.skipped


@pytest.mark.parametrize("point", ["beat.after_claim", "beat.after_commit"])
def test_a_beat_killed_mid_turn_loses_nothing(cluster, point):
    cluster.seed()
    cluster.start(beats=2)
    victim = cluster.beat("victim", CRONFLEET_FAILPOINTS=f"{point}=kill@4")

    cluster.run_until(WINDOW)
    assert victim.wait(timeout=30) == -signal.SIGKILL  # only the failpoint kills it
    cluster.finish()

    report = cluster.check(f"kill -9 a beat at {point}", lag_bound=FAULT_LAG_BOUND)
    assert_clean(report)
    if point == "beat.after_commit":  # its committed runs never reached the broker
        assert report.republished > 0
    # At beat.after_claim its transaction rolled back: the jobs wait for another beat's claim.


@pytest.mark.parametrize("point", ["worker.before_target", "worker.after_target"])
def test_a_worker_killed_around_the_target_call_loses_nothing(cluster, point):
    cluster.seed()
    cluster.start(workers=1)
    cluster.worker("victim", CRONFLEET_FAILPOINTS=f"{point}=kill@5")  # kills a pool process mid-run

    cluster.run_until(WINDOW)
    cluster.finish()

    report = cluster.check(
        f"kill -9 a worker process at {point}", raw_duplicates_allowed=True, lag_bound=FAULT_LAG_BOUND
    )
    assert_clean(report)
    assert_taken_over(report)


def test_a_whole_worker_killed_during_the_target_call_loses_nothing(cluster):
    cluster.seed(count=40, hold=0.1)  # each call spends 50 ms before and after its effect
    cluster.start(workers=1)
    victim = cluster.worker("victim")

    cluster.run_until(WINDOW / 2)
    for attempt in range(1, 6):  # a run seen held may end before the signal lands: try a new victim
        name = "victim" if attempt == 1 else f"victim{attempt}"
        if attempt > 1:
            victim = cluster.worker(name)
        wait_for_a_run_held_by(cluster, name)
        cluster.kill(victim)  # the whole process group: main process and pool, in target calls
        if holds_a_run(cluster, name):  # a dead worker's runs can no longer change
            break
    else:
        raise AssertionError("no victim held a run when it was killed")
    cluster.worker("replacement")
    cluster.run_until(WINDOW)
    cluster.finish()

    report = cluster.check(
        "kill -9 a whole worker during target calls", raw_duplicates_allowed=True, lag_bound=FAULT_LAG_BOUND
    )
    assert_clean(report)
    assert_taken_over(report)


def test_a_frozen_worker_loses_its_runs_and_cannot_write_when_it_wakes(cluster):
    cluster.seed()
    cluster.start(workers=1)
    victim = cluster.worker("victim", CRONFLEET_FAILPOINTS="worker.before_target=sleep:1")

    cluster.run_until(3)
    freeze_holding_a_run(cluster, victim, "victim")  # so that the run is taken over and its end refused
    frozen_at = db_now()
    wait_for(
        lambda: db_now() >= frozen_at + timedelta(seconds=2 * LEASE_SECONDS),
        timeout=2 * LEASE_SECONDS + 30,
        interval=0.2,
        what="twice the lease",
    )
    cluster.kill(victim, signal.SIGCONT)
    cluster.run_until(WINDOW + 3)
    cluster.finish()

    report = cluster.check("SIGSTOP a worker past its lease", raw_duplicates_allowed=True, lag_bound=FAULT_LAG_BOUND)
    assert_clean(report)
    assert_taken_over(report)
    assert report.stale_writes > 0  # the worker woke, wrote its ends, and was refused


def test_a_frozen_beat_delays_nothing_for_long(cluster):
    cluster.seed()
    cluster.start(beats=3)

    cluster.run_until(3)
    cluster.kill(cluster.beats["beat0"], signal.SIGSTOP)
    cluster.run_until(3 + 8)
    cluster.kill(cluster.beats["beat0"], signal.SIGCONT)
    cluster.run_until(WINDOW + 3)
    cluster.finish()

    assert_clean(cluster.check("SIGSTOP a beat", lag_bound=FAULT_LAG_BOUND))


def test_a_broker_that_loses_its_queue_loses_no_fire(cluster):
    cluster.seed()
    cluster.start()

    cluster.run_until(WINDOW / 2)
    # The workers paused until the queue holds messages, so that the flush loses some.
    for worker in cluster.workers.values():
        cluster.kill(worker, signal.SIGSTOP)
    wait_for(
        lambda: queue_depths([cluster.queue])[cluster.queue] > 0,
        timeout=30,
        interval=0.1,
        what="messages waiting on the broker",
    )
    flush_broker()  # what a Redis restart without persistence does to the queue
    for worker in cluster.workers.values():
        cluster.kill(worker, signal.SIGCONT)
    cluster.run_until(WINDOW)
    cluster.finish()

    report = cluster.check("broker queue lost", lag_bound=FAULT_LAG_BOUND)
    assert_clean(report)
    assert report.republished > 0  # the lost messages went out again


def test_four_beats_contending_on_the_same_due_set(cluster):
    cluster.seed()
    cluster.start(beats=4)

    cluster.run_until(WINDOW)
    cluster.finish()

    assert_clean(cluster.check("four beats on one due set"))


def test_every_message_delivered_twice_runs_once(cluster):
    cluster.seed()
    cluster.start()

    cluster.run_until(WINDOW / 2)
    runs = list(JobRun.objects.filter(tenant=cluster.tenant).values_list("id", "attempt"))
    publish_runs([RunMessage(run_id, attempt, cluster.queue, 60) for run_id, attempt in runs])
    cluster.run_until(WINDOW)
    cluster.finish()

    report = cluster.check("every message so far delivered twice", lag_bound=FAULT_LAG_BOUND)
    assert_clean(report)
    counted = JobRun.objects.filter(id__in=[run_id for run_id, _ in runs]).aggregate(n=Sum("duplicate_deliveries"))
    assert counted["n"] == len(runs)  # each second copy was received, refused and counted


def test_beats_and_workers_with_skewed_clocks_go_by_the_database_clock(cluster):
    assert_skewed("+45s", 45)
    assert_skewed("-120s", -120)
    cluster.seed()
    cluster.beat("beat0")
    cluster.beat("ahead", **skewed("+45s"))
    cluster.beat("behind", **skewed("-120s"))
    cluster.worker("worker-ahead", **skewed("+45s"))
    cluster.worker("worker-behind", **skewed("-120s"))

    cluster.run_until(WINDOW)
    for name in ("ahead", "behind"):
        assert "beat turn: claimed" in cluster.processes.log(name), f"the {name} beat did no work"
    cluster.finish()

    assert_clean(cluster.check("beats and workers with clocks +45 s and -120 s"))
    for name in ("worker-ahead", "worker-behind"):
        assert JobRun.objects.filter(tenant=cluster.tenant, worker__startswith=name).exists(), name


def test_all_beats_down_longer_than_the_catchup_window(cluster):
    cluster.seed(catchup_window_seconds=4)  # misfire policy run_once (the default)
    cluster.start(beats=2)

    cluster.run_until(4)
    for name in list(cluster.beats):
        cluster.processes.stop(cluster.beats.pop(name))
    cluster.run_until(4 + 10)
    for i in range(2):  # back after 10 s down; a fire over 1 s late counts as missed
        cluster.beat(f"back{i}", CRONFLEET_MISFIRE_GRACE_SECONDS="1")
    cluster.run_until(WINDOW + 10)
    cluster.finish()

    report = cluster.check("all beats down 10 s (catch-up window 4 s)", lag_bound=FAULT_LAG_BOUND)
    assert_clean(report)
    # Every job missed fires older than the window (one record each) and coalesced the rest.
    assert report.skipped["outside_catchup_window"] == 100
    assert report.skipped["coalesced"] > 0


def libfaketime() -> str | None:
    """The library the faketime command preloads, as built into it (Debian's names the
    directory with `$LIB`, which the dynamic loader expands); None without faketime."""
    command = shutil.which("faketime")
    if command is None:
        return None
    found = re.search(rb"/[\x21-\x7e]*/libfaketime\.so\.1", Path(command).read_bytes())
    return found.group().decode() if found else None


def skewed(offset: str) -> dict[str, str]:
    """The environment of a process whose clock is `offset` off: libfaketime preloaded
    itself, not through the faketime command, which makes a semaphore named after its own
    pid and fails when one of a process killed before it had that pid is left over."""
    library = libfaketime()
    assert library is not None  # the test is skipped without it
    return {"LD_PRELOAD": library, "FAKETIME": offset}


def assert_skewed(offset: str, seconds: float) -> None:
    """A process started with skewed(offset) reads a clock `seconds` off (a library the
    loader cannot preload is ignored with a warning, and the test would prove nothing)."""
    before = time.time()
    seen = subprocess.run(
        [sys.executable, "-c", "import time; print(time.time())"],
        env={**os.environ, **skewed(offset)},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert before + seconds - 1 <= float(seen.stdout) <= time.time() + seconds + 1, (seen.stdout, seen.stderr)


if libfaketime() is None:
    test_beats_and_workers_with_skewed_clocks_go_by_the_database_clock = pytest.mark.skip(
        reason="faketime is not installed (apt-get install faketime)"
    )(test_beats_and_workers_with_skewed_clocks_go_by_the_database_clock)
