"""The beat's own upkeep (dispatch.vacuum): an interval of 0 turns the job table's VACUUM off."""

from scheduler_app.dispatch import vacuum


def test_zero_turns_the_beats_vacuum_off():
    job_vacuum = vacuum.job_vacuum(every=0)

    assert job_vacuum.note(10**9) is False
    assert job_vacuum.thread is None
