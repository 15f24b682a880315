"""Bad input, before the API reads it: the parser caps what it reads at the body limit, whatever
the headers said. The requests themselves are tests/integration/api/test_api_bad_input.py.
"""

from __future__ import annotations

import io
import json

import pytest

from scheduler_app.api.errors import PayloadTooLarge
from scheduler_app.api.parsers import StrictJSONParser


def test_the_parser_caps_what_it_reads_whatever_the_headers_said(settings):
    # Under WSGI Django bounds the stream by Content-Length (checked first); a server that
    # hands over a longer stream still gets at most the limit + 1 bytes read.
    settings.CRONFLEET_API_MAX_BODY_BYTES = 1024
    stream = io.BytesIO(json.dumps({"description": "x" * 1_000_000}).encode())

    with pytest.raises(PayloadTooLarge):
        StrictJSONParser().parse(stream)

    assert stream.tell() == 1025
