"""The checks of a tenant's document that need no database (services/tenantcheck.py): a column
read within its range, the tenant's quotas, calendars, windows, key records, chains in a loop,
and how the problems read. The jobs' checks (validate_spec) are the integration tier's."""

from __future__ import annotations

import pytest

from scheduler_app.models import ApiKey, Job, Tenant
from scheduler_app.services import tenantcheck
from scheduler_app.services.keys import check_key_record
from scheduler_app.services.tenantcheck import DocumentRefused, Problems, columns_of
from scheduler_app.validation import InvalidInput

HASH = "ab" * 32


def fields(problems: Problems) -> list[str]:
    return [problem.field for problem in problems.found]


@pytest.mark.parametrize(
    ("row", "field", "message"),
    [
        ({"priority": 40000}, "jobs[0].priority", "less than or equal to 32767"),
        ({"max_attempts": -1}, "jobs[0].max_attempts", "greater than or equal to 0"),
        ({"name": "x" * 201}, "jobs[0].name", "at most 200 characters"),
        ({"timeout_seconds": "soon"}, "jobs[0].timeout_seconds", "must be an integer"),
        ({"colour": "red"}, "jobs[0].colour", "is not a column of Job"),
    ],
)
def test_a_column_out_of_its_range_is_named_not_left_to_the_database(row, field, message):
    with pytest.raises(InvalidInput) as refused:
        columns_of(Job, row, "jobs[0]")

    assert refused.value.field == field and message in refused.value.message


def test_the_tenants_quotas_and_weight_are_held_to_the_services_bounds():
    problems = Problems()
    tenant = Tenant(slug="moved", name="Moved", timezone="Mars/Olympus", weight=1001, api_requests_per_minute=10**9)

    tenantcheck.check_tenant(problems, tenant)

    assert fields(problems) == [
        "tenant 'moved': timezone",
        "tenant 'moved': weight",
        "tenant 'moved': api_requests_per_minute",
    ]


def test_calendars_and_windows_are_held_to_their_caps_and_names_are_unique():
    problems = Problems()
    holidays = {f"2030-01-{day:02d}": "" for day in range(1, 32)} | {f"2031-{m:02d}-01": "" for m in range(1, 13)}
    many = {
        f"{year}-{month:02d}-{day:02d}": ""
        for year in (2030, 2031, 2032)
        for month in range(1, 13)
        for day in range(1, 29)
    }
    calendars = [
        {"name": "work", "weekdays": "01234", "extra_holidays": holidays},
        {"name": "work", "weekdays": "01234", "extra_holidays": many},
    ]

    names = tenantcheck.check_calendars(problems, calendars)
    tenantcheck.check_windows(problems, [{"name": "freeze", "cron": "0 22 * * 5", "duration_minutes": 10**6}])

    assert names == {"work"}
    assert fields(problems) == [
        "calendars[1].name",
        "calendar 'work': extra_holidays",
        "window 'freeze': duration_minutes",
    ]


@pytest.mark.parametrize(
    ("key", "field"),
    [
        (ApiKey(name="deploy", prefix="0123456789ab", cell="", key_hash=HASH), None),
        (ApiKey(name="deploy", prefix="0123456789ab", cell="a", key_hash=HASH), None),
        (ApiKey(name="deploy", prefix="0123456789AB", cell="", key_hash=HASH), "prefix"),
        (ApiKey(name="deploy", prefix="0123456789ab", cell="A-1", key_hash=HASH), "cell"),
        (ApiKey(name="deploy", prefix="0123456789ab", cell="", key_hash="my secret"), "key_hash"),
        (ApiKey(name="deploy", prefix="0123456789ab", cell="", key_hash=HASH.upper()), "key_hash"),
        (ApiKey(name="\u202edeploy", prefix="0123456789ab", cell="", key_hash=HASH), "name"),
    ],
)
def test_a_key_record_must_be_of_the_form_the_app_makes(key, field):
    if field is None:
        check_key_record(key)
        return
    with pytest.raises(InvalidInput) as refused:
        check_key_record(key)
    assert refused.value.field == field


def test_a_chain_that_leads_back_to_itself_is_named_with_its_path():
    problems = Problems()

    tenantcheck.check_loops(problems, {"a": "b", "b": "c", "c": "a", "d": "a"})

    assert [(p.field, p.message) for p in problems.found][:1] == [
        ("job 'a': after_job", "makes a loop: a -> b -> c -> a")
    ]
    assert fields(problems) == ["job 'a': after_job", "job 'b': after_job", "job 'c': after_job"]


def test_one_problem_reads_as_itself_and_many_one_line_each_up_to_the_cap():
    one = DocumentRefused([InvalidInput("job 'x': task", "no")])
    assert (one.field, one.message) == ("job 'x': task", "no")

    problems = Problems()
    for i in range(tenantcheck.MAX_PROBLEMS + 3):
        problems.add(f"job 'j{i}': timeout_seconds", "too long")
    with pytest.raises(DocumentRefused) as refused:
        problems.raise_any()

    lines = refused.value.message.splitlines()
    assert (
        refused.value.field == "document" and lines[0] == f"{tenantcheck.MAX_PROBLEMS + 3} problems, nothing imported:"
    )
    assert lines[1] == "  job 'j0': timeout_seconds: too long" and lines[-1] == "  ... and 3 more"
    assert len(lines) == tenantcheck.MAX_PROBLEMS + 2
