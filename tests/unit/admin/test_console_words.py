"""What an operator reads in the console (issue 24, item 4), without a database: a small
duration and its threshold are written apart. The pages, alerts and commands are tested in
tests/integration/admin/test_console_words.py."""

from scheduler_app import alerts


def test_small_durations_read_apart_from_their_thresholds():
    assert alerts.evaluate.seconds_pair(0.0004, 0.001) == ("0.0004 s", "0.001 s")
    assert alerts.evaluate.seconds_pair(47.123, 10) == ("47.1 s", "10 s")
    assert alerts.evaluate.seconds_pair(10.0004, 10) == ("10.0004 s", "10 s")
