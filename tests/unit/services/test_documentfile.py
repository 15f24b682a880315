"""services/documentfile.py without a database: a document file in the layout dump() writes
has its runs read a line at a time as they are used, any other JSON layout is read whole up
to a bound, and a broken run names its index."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from django.test import override_settings

from scheduler_app.services import documentfile, tenantmove
from scheduler_app.validation import InvalidInput

RUNS = [{"job": "nightly", "state": "succeeded", "scheduled_at": datetime(2030, 1, 1, i, tzinfo=UTC)} for i in range(3)]
DOCUMENT = {"format": tenantmove.FORMAT, "cut": "2030-01-02T00:00:00+00:00", "tenant": {"slug": "t"}, "jobs": []}


def dumped(tmp_path, runs=RUNS) -> str:
    path = tmp_path / "t.json"
    with path.open("w") as out:
        tenantmove.dump({**DOCUMENT, "runs": runs}, out)
    return path


def test_the_runs_of_an_exported_file_are_read_as_they_are_used(tmp_path):
    document = documentfile.read_document(dumped(tmp_path))

    assert isinstance(document["runs"], documentfile.FileRuns)
    assert {key: document[key] for key in DOCUMENT} == DOCUMENT
    assert [run["scheduled_at"] for run in document["runs"]] == [run["scheduled_at"].isoformat() for run in RUNS]
    assert len(list(document["runs"])) == 3  # read again from the file, as often as asked


@pytest.mark.parametrize("key", ["", "0123456789abcdef0123456789abcdef-shared"], ids=["unsealed", "sealed"])
def test_no_runs_read_as_none(tmp_path, key):
    with override_settings(CRONFLEET_TENANT_DOCUMENT_KEY=key):
        assert list(documentfile.read_document(dumped(tmp_path, runs=[]))["runs"]) == []


def test_another_layout_is_read_whole_up_to_the_bound(tmp_path, monkeypatch):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({**DOCUMENT, "runs": [{"job": "nightly"}]}))  # one line, as an editor may save it

    assert documentfile.read_document(path)["runs"] == [{"job": "nightly"}]
    monkeypatch.setattr(documentfile, "MAX_WHOLE_BYTES", 10)
    with pytest.raises(InvalidInput, match="not in the layout `tenants export` writes") as refused:
        documentfile.read_document(path)
    assert refused.value.field == "file"


@pytest.mark.parametrize(
    ("breaking", "field", "message"),
    [
        (lambda text: text.replace('"job": "nightly"', '"job": nightly', 1), "runs[0]", "not JSON"),
        (lambda text: text[: text.rindex("\n ]")] + "\n", "runs", "not closed"),
    ],
    ids=["a broken run", "the list not closed"],
)
def test_a_broken_run_names_its_place(tmp_path, breaking, field, message):
    path = dumped(tmp_path)
    path.write_text(breaking(path.read_text()))

    with pytest.raises(InvalidInput, match=message) as refused:
        list(documentfile.read_document(path)["runs"])
    assert refused.value.field == field


def test_a_file_that_is_no_document_is_refused_naming_the_file(tmp_path):
    path = tmp_path / "t.json"
    path.write_text("[1, 2]")
    with pytest.raises(InvalidInput, match="a JSON object expected"):
        documentfile.read_document(path)
    with pytest.raises(InvalidInput, match="cannot read"):
        documentfile.read_document(tmp_path / "missing.json")
