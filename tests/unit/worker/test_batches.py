"""Batched runs: which runs go out together, grouped by target kind up to the batch size
(dispatch.publish.batched)."""

from scheduler_app.dispatch.publish import RunMessage, batched


def message(run_id, *, batch=True, kind="task", priority=5, queue="q", timeout=10):
    return RunMessage(run_id, 1, queue, timeout, priority, batch, kind)


def test_batched_runs_are_grouped_by_target_kind_up_to_the_batch_size():
    messages = [message(i) for i in range(250)] + [message(1000 + i, kind="http") for i in range(3)]
    messages += [message(2000, batch=False)]

    alone, batches = batched(messages, 100)

    assert [m.run_id for m in alone] == [2000]
    assert [len(b) for b in batches] == [100, 100, 50, 3]
    assert {m.target_kind for m in batches[3]} == {"http"}


def test_a_queue_can_batch_every_job_on_it(settings):
    settings.CRONFLEET_BATCH_QUEUES = ["bulk"]

    alone, batches = batched([message(1, batch=False, queue="bulk"), message(2, batch=False)], 100)

    assert [m.run_id for m in alone] == [2] and [[m.run_id for m in b] for b in batches] == [[1]]
