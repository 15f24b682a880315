"""The django.tasks backend's pure mappings: Django's priority and queue onto Cronfleet's, run
states onto Django's statuses, and a stored error back into Django's TaskError parts."""

from __future__ import annotations

import pytest

from scheduler_app import taskapi
from scheduler_app.models import JobRun, RunState

if taskapi.api is None:
    pytest.skip("neither django.tasks nor the django-tasks backport is installed", allow_module_level=True)

from scheduler_app.djangotasks import results  # noqa: E402 - needs the task API
from scheduler_app.djangotasks.backend import cronfleet_priority, cronfleet_queue  # noqa: E402
from scheduler_app.targets.djangotask import error_text  # noqa: E402


@pytest.mark.parametrize(
    ("django", "cronfleet"), [(-100, 0), (-50, 2), (-1, 4), (0, 5), (1, 6), (50, 7), (99, 9), (100, 9)]
)
def test_priority_maps_in_order_with_django_s_default_on_cronfleet_s(django, cronfleet):
    assert cronfleet_priority(django) == cronfleet


def test_every_priority_lands_in_cronfleet_s_range_in_order():
    mapped = [cronfleet_priority(p) for p in range(-100, 101)]

    assert mapped == sorted(mapped) and min(mapped) == 0 and max(mapped) == 9


def test_django_s_default_queue_is_cronfleet_s_default_queue():
    assert (cronfleet_queue("default"), cronfleet_queue("reports")) == ("", "reports")


@pytest.mark.parametrize(
    ("state", "status"),
    [
        (RunState.PENDING, "READY"),
        (RunState.QUEUED, "READY"),
        (RunState.RETRYING, "READY"),
        (RunState.LOST, "READY"),
        (RunState.RUNNING, "RUNNING"),
        (RunState.SUCCEEDED, "SUCCESSFUL"),
        (RunState.FAILED, "FAILED"),
        (RunState.DEAD, "FAILED"),
        (RunState.SKIPPED, "FAILED"),
        (RunState.CANCELLED, "FAILED"),
    ],
)
def test_run_states_map_onto_django_s_statuses(state, status):
    assert results.status_name(JobRun(state=state)) == status


def test_a_call_not_fired_yet_is_ready():
    assert results.status_name(None) == "READY"


def test_a_task_s_error_comes_back_as_its_class_path_and_traceback():
    try:
        raise KeyError("missing")
    except KeyError as exc:
        text = error_text(exc)

    path, trace = results.split_error(text)

    assert path == "builtins.KeyError"
    assert trace.startswith("Traceback (most recent call last):") and "KeyError: 'missing'" in trace


def test_cronfleet_s_own_error_comes_back_whole():
    text = "django task 'x.y' is not importable in this worker: No module named 'x'"

    assert results.split_error(text) == ("scheduler_app.targets.base.PermanentFailure", text)


def test_a_result_cut_at_the_bound_comes_back_as_text():
    assert results.return_value(JobRun(result='{"a": 1}')) == {"a": 1}
    assert results.return_value(JobRun(result='{"a": "xxx... [9000 bytes]')) == '{"a": "xxx... [9000 bytes]'
