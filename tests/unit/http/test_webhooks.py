"""Standard Webhooks signing and verification (scheduler_app.http.signing). Pure: no database."""

from __future__ import annotations

import base64
import secrets

import pytest

from scheduler_app.http import signing as webhooks
from scheduler_app.http.signing import (
    InvalidSignature,
    headers,
    new_secret,
    parse_secret,
    sign,
    signature_header,
    verify,
)

# The Standard Webhooks reference vector (also used by the Svix libraries' tests).
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
MSG_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
TIMESTAMP = 1614265330
BODY = b'{"test": 2432232314}'
SIGNATURE = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="

OTHER = "whsec_" + base64.b64encode(bytes(range(32))).decode()


def signed(secret_texts=(SECRET,), *, msg_id=MSG_ID, timestamp=TIMESTAMP, body=BODY) -> dict[str, str]:
    return headers(
        [parse_secret(t) for t in secret_texts],
        msg_id,
        timestamp,
        body,
        attempt=1,
        scheduled_at="2021-02-21T15:02:00Z",
    )


# --- signing: known answers -------------------------------------------------------------


def test_reference_vector():
    assert sign(parse_secret(SECRET), MSG_ID, TIMESTAMP, BODY) == SIGNATURE


def test_reference_vector_key_bytes():
    assert parse_secret(SECRET) == base64.b64decode("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
    assert len(parse_secret(SECRET)) == 24


def test_signature_header_one_per_secret_in_order():
    keys = [parse_secret(SECRET), parse_secret(OTHER)]
    value = signature_header(keys, MSG_ID, TIMESTAMP, BODY)
    first, second = value.split(" ")
    assert first == SIGNATURE
    assert second == sign(parse_secret(OTHER), MSG_ID, TIMESTAMP, BODY)
    assert second != first


def test_signature_header_needs_a_secret():
    with pytest.raises(ValueError, match="at least one"):
        signature_header([], MSG_ID, TIMESTAMP, BODY)


def test_headers():
    h = headers([parse_secret(SECRET)], MSG_ID, TIMESTAMP, BODY, attempt=3, scheduled_at="2021-02-21T15:02:00Z")
    assert h == {
        "webhook-id": MSG_ID,
        "webhook-timestamp": "1614265330",
        "webhook-signature": SIGNATURE,
        "cronfleet-attempt": "3",
        "cronfleet-scheduled-at": "2021-02-21T15:02:00Z",
    }
    assert all(isinstance(v, str) for v in h.values())


# --- verification ------------------------------------------------------------------------


def test_verify_reference_vector():
    verify([SECRET], signed(), BODY, now=TIMESTAMP)


def test_verify_with_the_spec_headers_only():
    hdrs = {"webhook-id": MSG_ID, "webhook-timestamp": str(TIMESTAMP), "webhook-signature": SIGNATURE}
    verify([SECRET], hdrs, BODY, now=TIMESTAMP)


def test_header_names_are_case_insensitive():
    hdrs = {"Webhook-Id": MSG_ID, "WEBHOOK-TIMESTAMP": str(TIMESTAMP), "Webhook-Signature": SIGNATURE}
    verify([SECRET], hdrs, BODY, now=TIMESTAMP)


@pytest.mark.parametrize(
    "change",
    [
        {"body": b'{"test": 2432232315}'},
        {"body": BODY + b" "},
        {"body": b""},
    ],
)
def test_tampered_body_fails(change):
    with pytest.raises(InvalidSignature, match="no signature matches"):
        verify([SECRET], signed(), change["body"], now=TIMESTAMP)


def test_tampered_id_fails():
    hdrs = signed() | {"webhook-id": "msg_p5jXN8AQM9LWM0D4loKWxJel"}
    with pytest.raises(InvalidSignature, match="no signature matches"):
        verify([SECRET], hdrs, BODY, now=TIMESTAMP)


def test_tampered_timestamp_fails():
    hdrs = signed() | {"webhook-timestamp": str(TIMESTAMP + 1)}
    with pytest.raises(InvalidSignature, match="no signature matches"):
        verify([SECRET], hdrs, BODY, now=TIMESTAMP)


def test_tampered_signature_fails():
    hdrs = signed() | {"webhook-signature": SIGNATURE.replace("g0hM", "g1hM")}
    with pytest.raises(InvalidSignature, match="no signature matches"):
        verify([SECRET], hdrs, BODY, now=TIMESTAMP)


def test_wrong_secret_fails():
    with pytest.raises(InvalidSignature, match="no signature matches"):
        verify([OTHER], signed(), BODY, now=TIMESTAMP)


@pytest.mark.parametrize("offset", [0, 1, 299, 300, -1, -300])
def test_timestamp_within_tolerance(offset):
    verify([SECRET], signed(), BODY, now=TIMESTAMP + offset)


def test_expired_timestamp_fails():
    with pytest.raises(InvalidSignature, match="too old"):
        verify([SECRET], signed(), BODY, now=TIMESTAMP + 301)


def test_future_timestamp_fails():
    with pytest.raises(InvalidSignature, match="future"):
        verify([SECRET], signed(), BODY, now=TIMESTAMP - 301)


def test_custom_tolerance():
    verify([SECRET], signed(), BODY, now=TIMESTAMP + 3600, tolerance=3600)
    with pytest.raises(InvalidSignature, match="too old"):
        verify([SECRET], signed(), BODY, now=TIMESTAMP + 11, tolerance=10)


def test_timestamp_is_checked_before_the_signature():
    # A stale request is rejected as stale even when its signature is also wrong.
    hdrs = signed() | {"webhook-signature": "v1,AAAA"}
    with pytest.raises(InvalidSignature, match="too old"):
        verify([SECRET], hdrs, BODY, now=TIMESTAMP + 10_000)


@pytest.mark.parametrize("value", ["abc", "1614265330.0", "-1614265330", "1e9", "", " ", "١٦١٤٢٦٥٣٣٠"])
def test_non_integer_timestamp_fails(value):
    hdrs = signed() | {"webhook-timestamp": value}
    with pytest.raises(InvalidSignature, match="webhook-timestamp"):
        verify([SECRET], hdrs, BODY, now=TIMESTAMP)


@pytest.mark.parametrize("name", ["webhook-id", "webhook-timestamp", "webhook-signature"])
def test_missing_header_fails(name):
    hdrs = {k: v for k, v in signed().items() if k != name}
    with pytest.raises(InvalidSignature, match=f"missing header.*{name}"):
        verify([SECRET], hdrs, BODY, now=TIMESTAMP)


def test_missing_headers_are_all_named():
    with pytest.raises(InvalidSignature) as info:
        verify([SECRET], {}, BODY, now=TIMESTAMP)
    assert info.value.reason == "missing header(s): webhook-id, webhook-timestamp, webhook-signature"


def test_invalid_signature_is_a_value_error_with_reason():
    with pytest.raises(ValueError) as info:
        verify([OTHER], signed(), BODY, now=TIMESTAMP)
    assert isinstance(info.value, InvalidSignature)
    assert info.value.reason == str(info.value) == "no signature matches"


# --- rotation and signature versions -----------------------------------------------------


def test_rotation_header_verifies_with_either_secret_alone():
    hdrs = signed([OTHER, SECRET])
    assert len(hdrs["webhook-signature"].split(" ")) == 2
    verify([SECRET], hdrs, BODY, now=TIMESTAMP)
    verify([OTHER], hdrs, BODY, now=TIMESTAMP)
    verify([OTHER, SECRET], hdrs, BODY, now=TIMESTAMP)


def test_receiver_with_two_secrets_accepts_either_sender_secret():
    verify([OTHER, SECRET], signed([SECRET]), BODY, now=TIMESTAMP)
    verify([SECRET, OTHER], signed([OTHER]), BODY, now=TIMESTAMP)


def test_rotation_header_rejects_a_third_secret():
    third = new_secret()
    with pytest.raises(InvalidSignature, match="no signature matches"):
        verify([third], signed([OTHER, SECRET]), BODY, now=TIMESTAMP)


def test_other_signature_versions_are_ignored():
    # A v1a/v2 entry carrying the right bytes must not count; a v1 entry next to it does.
    b64 = SIGNATURE.removeprefix("v1,")
    hdrs = signed() | {"webhook-signature": f"v1a,{b64} v2,{b64}"}
    with pytest.raises(InvalidSignature, match="no v1 signature"):
        verify([SECRET], hdrs, BODY, now=TIMESTAMP)
    hdrs = signed() | {"webhook-signature": f"v1a,{b64} v2,garbage {SIGNATURE}"}
    verify([SECRET], hdrs, BODY, now=TIMESTAMP)


def test_signature_list_with_extra_whitespace_and_junk():
    hdrs = signed() | {"webhook-signature": f"  v1,AAAA  nonsense  {SIGNATURE}\t"}
    verify([SECRET], hdrs, BODY, now=TIMESTAMP)


def test_non_ascii_signature_entry_is_just_a_mismatch():
    hdrs = signed() | {"webhook-signature": "v1,ééé"}
    with pytest.raises(InvalidSignature, match="no signature matches"):
        verify([SECRET], hdrs, BODY, now=TIMESTAMP)


# --- secrets -----------------------------------------------------------------------------


def test_new_secret_round_trips_and_is_random():
    a, b = new_secret(), new_secret()
    assert a.startswith("whsec_")
    assert len(parse_secret(a)) == 32
    assert a != b


def test_new_secret_uses_token_bytes(monkeypatch):
    calls = []

    def fake(n):
        calls.append(n)
        return b"\x01" * n

    monkeypatch.setattr(secrets, "token_bytes", fake)
    assert new_secret() == "whsec_" + base64.b64encode(b"\x01" * 32).decode()
    assert calls == [32]


def test_new_secret_signs_and_verifies():
    text = new_secret()
    hdrs = headers([parse_secret(text)], "msg_1", 100, b"{}", attempt=1, scheduled_at="x")
    verify([text], hdrs, b"{}", now=100)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "must start with 'whsec_'"),
        ("WHSEC_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "must start with 'whsec_'"),
        ("whsk_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "must start with 'whsec_'"),
        ("", "must start with 'whsec_'"),
        ("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaS!", "not valid base64"),
        ("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaS", "not valid base64"),  # bad padding
        ("whsec_MfKQ9r8G KYqrTwjUPD8ILPZIo2LaLaSw", "not valid base64"),
        ("whsec_", "too short: 0 bytes, at least 24"),
        ("whsec_" + base64.b64encode(b"x" * 23).decode(), "too short: 23 bytes, at least 24"),
    ],
)
def test_bad_secret_rejected(text, message):
    with pytest.raises(ValueError, match=message) as info:
        parse_secret(text)
    assert not isinstance(info.value, InvalidSignature)
    # The secret material never appears in the message.
    payload = text.removeprefix("whsec_")
    if len(payload) > 8:
        assert payload not in str(info.value)


def test_non_str_secret_rejected():
    with pytest.raises(ValueError, match="must be a str"):
        parse_secret(b"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")  # type: ignore[arg-type]


def test_minimum_length_secret_accepted():
    assert parse_secret("whsec_" + base64.b64encode(b"x" * 24).decode()) == b"x" * 24


def test_verify_with_a_bad_secret_is_a_configuration_error():
    with pytest.raises(ValueError, match="must start with 'whsec_'") as info:
        verify(["nope"], signed(), BODY, now=TIMESTAMP)
    assert not isinstance(info.value, InvalidSignature)


def test_verify_needs_a_secret():
    with pytest.raises(ValueError, match="at least one"):
        verify([], signed(), BODY, now=TIMESTAMP)


def test_module_is_pure():
    source = open(webhooks.__file__, encoding="utf-8").read()
    code = source.split('"""', 2)[2]  # skip the docstring, whose example imports Django
    for forbidden in ("django", "import time", "datetime", "scheduler_app"):
        assert forbidden not in code
