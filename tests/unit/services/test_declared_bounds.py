"""The bounds of a schedules declaration (services/declared_bounds.py and the reading half of
services/declared.py), the API's own: a file's size, each job's nesting and JSON size, what
jsonb cannot hold, and the scope a file names. Pure: no database."""

from __future__ import annotations

import json
import math

import pytest

from scheduler_app.services import declared, declared_bounds
from scheduler_app.validation import MAX_DEPTH, InvalidInput, check_json


def nested(depth: int, leaf=1) -> dict:
    """{"a": {"a": ... leaf}}: `depth` levels of objects, built without recursion."""
    value = leaf
    for _ in range(depth):
        value = {"a": value}
    return value


def group(*jobs: dict, owner: str = "ops", tenant: str = "alpha") -> dict:
    return {"owner": owner, "tenant": tenant, "jobs": list(jobs)}


def job(**fields) -> dict:
    return {"name": "deep", "every": 600, "task": "scheduler_app.echo", **fields}


def problems_of(data) -> list[str]:
    with pytest.raises(declared.DeclarationError) as caught:
        declared.read_groups("beta-ops.toml", data)
    return caught.value.problems


# --- check_json ----------------------------------------------------------------------------


def test_check_json_allows_the_api_s_depth_and_refuses_one_more_naming_the_field():
    check_json("kwargs", nested(MAX_DEPTH - 1))  # the field itself is level 1

    with pytest.raises(InvalidInput) as caught:
        check_json("kwargs", nested(MAX_DEPTH))

    assert (caught.value.field, caught.value.message) == ("kwargs", f"must not nest deeper than {MAX_DEPTH} levels")


def test_check_json_refuses_five_thousand_levels_without_a_recursion_error():
    deep_list: list = []
    for _ in range(5000):
        deep_list = [deep_list]

    for value in (nested(5000), deep_list):
        with pytest.raises(InvalidInput, match="must not nest deeper than 32 levels"):
            check_json("args", value)


@pytest.mark.parametrize(
    ("value", "field", "message"),
    [
        ({"x": math.nan}, "kwargs.x", "must be a finite number (nan is not one)"),
        ({"x": [1, math.inf]}, "kwargs.x.1", "must be a finite number (inf is not one)"),
        ({"x": "a\x00b"}, "kwargs.x", "text must not contain NUL"),
        ({"a\x00": 1}, "kwargs", "a key must not contain NUL"),
        ({"x": "\ud800"}, "kwargs.x", "text must not contain lone surrogates"),
    ],
)
def test_check_json_refuses_what_jsonb_cannot_hold_naming_the_path(value, field, message):
    with pytest.raises(InvalidInput) as caught:
        check_json("kwargs", value)

    assert caught.value.field == field and caught.value.message.startswith(message)


# --- a declared job's fields ---------------------------------------------------------------


def test_a_job_nested_too_deep_is_one_problem_naming_the_job_and_the_field():
    problems = problems_of(group(job(kwargs=nested(5000))))

    assert problems == ["beta-ops.toml: job 'deep': kwargs: must not nest deeper than 32 levels"]


def test_groups_nested_too_deep_are_one_problem_not_a_recursion_error():
    data: dict = {"owner": "ops", "tenant": "alpha", "jobs": [job()]}
    for _ in range(5000):
        data = {"groups": [data]}

    assert problems_of(data) == ["beta-ops.toml: groups: must not nest deeper than 32 levels"]


def test_a_field_over_the_api_s_body_limit_is_refused_naming_it(settings):
    settings.CRONFLEET_API_MAX_BODY_BYTES = 4096

    problems = problems_of(group(job(kwargs={"blob": "x" * 5000}), job(name="fine")))

    assert problems == [
        "beta-ops.toml: job 'deep': kwargs: is 5011 bytes as JSON, more than CRONFLEET_API_MAX_BODY_BYTES (4096)"
    ]


def test_fields_each_under_the_limit_but_over_it_together_are_refused(settings):
    settings.CRONFLEET_API_MAX_BODY_BYTES = 4096

    problems = problems_of(group(job(args=["x" * 2500], description="y" * 2500)))

    assert len(problems) == 1 and problems[0].startswith("beta-ops.toml: job 'deep': all fields: are ")
    assert problems[0].endswith("bytes as JSON together, more than CRONFLEET_API_MAX_BODY_BYTES (4096)")


def test_the_size_counted_is_the_json_the_api_would_receive():
    value = {"when": "2030-01-01", "text": "é", "list": [1, 2.5, None, True]}

    assert declared_bounds.json_size(value) == len(
        json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
    )


def test_a_job_within_the_bounds_reads_as_before():
    found = declared.read_groups("beta-ops.toml", group(job(kwargs=nested(MAX_DEPTH - 1))))

    assert [item.spec.name for item in found.jobs] == ["deep"]
    assert found.scope == {("ops", "alpha"): "beta-ops.toml"}


# --- the scope a declaration names ---------------------------------------------------------


def test_the_scope_is_each_owner_and_tenant_a_job_or_an_empty_group_names():
    data = {
        "owner": "ops",
        "tenant": "beta",
        "jobs": [job(name="a"), job(name="b", tenant="gamma")],
        "groups": [{"owner": "billing"}, {"owner": "ops", "tenant": "alpha", "groups": [{"owner": "web"}]}],
    }

    found = declared.read_groups("f.toml", data)

    # The group {"owner": "ops", "tenant": "alpha"} has a group inside, so it passes its tenant
    # on rather than naming (ops, alpha) itself.
    assert sorted(found.scope) == [("billing", "beta"), ("ops", "beta"), ("ops", "gamma"), ("web", "alpha")]


def test_a_file_with_no_owner_or_tenant_and_no_jobs_names_nothing():
    assert declared.read_groups("f.toml", {"owner": "ops"}).scope == {}
    assert declared.read_groups("app.schedules", {}).scope == {}


# --- files ---------------------------------------------------------------------------------


def test_a_file_over_the_limit_is_refused_unread_naming_the_setting(tmp_path, settings):
    settings.CRONFLEET_SCHEDULES_MAX_FILE_BYTES = 2048
    path = tmp_path / "beta-ops.toml"
    path.write_text('owner = "ops"\ntenant = "beta"\n' + "# padding\n" * 300)

    with pytest.raises(declared.DeclarationError) as caught:
        declared.read_file(path)

    assert caught.value.problems == [
        f"{path}: is {path.stat().st_size} bytes, more than CRONFLEET_SCHEDULES_MAX_FILE_BYTES (2048); not read"
    ]


def test_a_file_that_is_not_utf8_is_one_problem(tmp_path):
    path = tmp_path / "beta-ops.toml"
    path.write_bytes(b'owner = "\xff"\n')

    with pytest.raises(declared.DeclarationError) as caught:
        declared.read_file(path)

    assert caught.value.problems == [f"{path}: is not valid UTF-8 (byte 9)"]


def deep_toml(levels: int, *, before: str = "", after: str = "") -> str:
    value = "{a = " * levels + "1" + "}" * levels
    return f'owner = "ops"\ntenant = "beta"\n\n[[jobs]]\n{before}kwargs = {value}\n{after}'


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Too deep for tomllib itself (it recurses): found by reading the text.
        (deep_toml(5000, before='name = "deep"\n'), "job 'deep': kwargs: must not nest deeper than 32 levels (line 6)"),
        (deep_toml(5000, after='name = "late"\n'), "job 'late': kwargs: must not nest deeper than 32 levels (line 5)"),
        (deep_toml(5000), "[[jobs]]: kwargs: must not nest deeper than 32 levels (line 5)"),
        # Deep, but tomllib reads it: checked on the values read.
        (deep_toml(40, before='name = "deep"\n'), "job 'deep': kwargs: must not nest deeper than 32 levels"),
        (
            'owner = "ops"\ntenant = "beta"\n[[jobs]]\nname = "dotted"\nkwargs.' + ".".join(["a"] * 5000) + " = 1\n",
            "job 'dotted': kwargs: must not nest deeper than 32 levels",
        ),
        (
            'owner = "ops"\ntenant = "beta"\n[[jobs]]\nname = "table"\n[jobs.kwargs.' + ".".join(["a"] * 5000) + "]\n",
            "job 'table': kwargs: must not nest deeper than 32 levels",
        ),
    ],
)
def test_a_file_nested_too_deep_is_one_problem_naming_the_job_and_the_field(tmp_path, text, expected):
    path = tmp_path / "beta-ops.toml"
    path.write_text(text)

    with pytest.raises(declared.DeclarationError) as caught:
        declared.read_file(path)

    assert caught.value.problems == [f"{path}: {expected}"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Brackets inside strings and comments are not nesting.
        ("name = \"[[[{{{\"\nx = '[[['\n# [[[[\nkwargs = [[[[1]]]]\n", (4, "kwargs", "", "[[[{{{")),
        ('[[jobs]]\nname = """a\n"[[[[["""\nkwargs = {a = [[[[1]]]]}\n', (4, "kwargs", "[[jobs]]", 'a\n"[[[[[')),
        (
            '[[jobs]]\nname = "ok"\nargs = [1]\n\n[[groups.jobs]]\nname = "x\\"y"\nargs = [\n [[[1]]]\n]\n',
            (8, "args", "[[groups.jobs]]", 'x\\"y'),
        ),
    ],
)
def test_find_deep_follows_strings_comments_and_tables(text, expected):
    line, key, table, name = expected

    found = declared_bounds.find_deep(text, max_depth=3)

    assert found == declared_bounds.Deep(line=line, key=key, table=table, name=name)


def test_find_deep_finds_nothing_in_a_shallow_text():
    assert declared_bounds.find_deep(deep_toml(MAX_DEPTH)) is None
