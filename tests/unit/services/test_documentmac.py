"""services/documentmac.py without a database: a document streamed through MacWriter stays
JSON, verifies under the key it was written with, and is refused changed, unsealed or under
another key, naming the field `mac`."""

from __future__ import annotations

import io
import json

import pytest
from django.test import override_settings

from scheduler_app.services import documentmac
from scheduler_app.validation import InvalidInput

KEY = "0123456789abcdef0123456789abcdef-shared"


def sealed(parts: list[str], key: str = KEY) -> str:
    out = io.StringIO()
    writer = documentmac.MacWriter(out, key.encode())
    for part in parts:
        writer.write(part)
    writer.seal()
    return out.getvalue()


PARTS = ['{\n "format": "cronfleet-tenant/1",\n "runs": [', '\n  {"id": 1}', ',\n  {"id": 2}', "\n ]"]


def test_a_sealed_document_is_json_and_verifies():
    text = sealed(PARTS)

    with override_settings(CRONFLEET_TENANT_DOCUMENT_KEY=KEY):
        assert documentmac.verified(text) == text
    document = json.loads(text)
    assert document["runs"] == [{"id": 1}, {"id": 2}]
    assert document["mac"].startswith("hmac-sha256:")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (sealed(PARTS).replace('"id": 2', '"id": 3'), "does not match the document"),
        (sealed(PARTS, key=KEY[::-1]), "does not match the document"),
        ("".join(PARTS) + "\n}\n", "carries no MAC"),
        (sealed(PARTS).replace("hmac-sha256:", "hmac-md5:"), "carries no MAC"),
    ],
    ids=["changed", "another key", "unsealed", "another scheme"],
)
def test_a_changed_or_unsealed_document_is_refused_naming_the_mac(text, message):
    with override_settings(CRONFLEET_TENANT_DOCUMENT_KEY=KEY), pytest.raises(InvalidInput) as refused:
        documentmac.verified(text)

    assert refused.value.field == "mac" and message in refused.value.message


def test_without_a_key_nothing_is_checked():
    text = sealed(PARTS).replace('"id": 2', '"id": 3')

    with override_settings(CRONFLEET_TENANT_DOCUMENT_KEY=""):
        assert documentmac.verified(text) == text


@pytest.mark.parametrize(
    ("change", "refused"),
    [(lambda text: text, None), (lambda text: text.replace('"id": 2', '"id": 3'), "does not match")],
    ids=["unchanged", "changed"],
)
def test_a_file_is_verified_in_blocks_as_the_text_is(tmp_path, monkeypatch, change, refused):
    monkeypatch.setattr(documentmac, "BLOCK", 7)  # many blocks, one cut inside the tail's neighbour
    path = tmp_path / "document.json"
    path.write_text(change(sealed(PARTS * 50)))

    with override_settings(CRONFLEET_TENANT_DOCUMENT_KEY=KEY):
        if refused is None:
            documentmac.verify_file(path)
        else:
            with pytest.raises(InvalidInput, match=refused):
                documentmac.verify_file(path)
