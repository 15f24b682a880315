"""What answers whom (docs/operating-tls.md): a host written as a literal address in any form
the resolver accepts is read as the resolver reads it (guard, the one judge of HTTP jobs' and
alert webhooks' addresses). The refusals when saved are tested in
tests/integration/deploy/test_exposure.py."""

from __future__ import annotations

import ipaddress

import pytest

from scheduler_app.http import guard


@pytest.mark.parametrize(
    ("host", "address"),
    [
        ("127.0.0.1", "127.0.0.1"),
        ("2130706433", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),
        ("0x7f.0.0.1", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("10.1", "10.0.0.1"),
        ("::ffff:127.0.0.1", "::ffff:127.0.0.1"),
        ("example.com", None),
        ("1e100.net", None),
        ("08.0.0.1", None),  # not a number to the resolver: a name, judged when resolved
    ],
)
def test_a_literal_address_is_read_as_the_resolver_reads_it(host, address):
    assert guard.literal_address(host) == (ipaddress.ip_address(address) if address else None)
