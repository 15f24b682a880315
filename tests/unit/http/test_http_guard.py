"""SSRF guard (scheduler_app.http.guard). No database; no traffic anywhere but 127.0.0.1."""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from urllib.parse import urlsplit

import pytest

from scheduler_app.http.guard import (
    BlockedTarget,
    ParsedTarget,
    _checked_origin,
    address_allowed,
    check_url,
    connect_checked,
    resolve_and_check,
)

LOOPBACK_NET = [ipaddress.ip_network("127.0.0.0/8")]

# --------------------------------------------------------------------------------------
# address_allowed
# --------------------------------------------------------------------------------------

BLOCKED = [
    # IPv4
    ("127.0.0.1", "loopback"),
    ("127.255.255.254", "loopback"),
    ("10.0.0.1", "private"),
    ("172.16.0.1", "private"),
    ("172.31.255.255", "private"),
    ("192.168.1.1", "private"),
    ("169.254.1.1", "link_local"),
    ("100.64.0.1", "carrier_grade_nat"),
    ("100.127.255.254", "carrier_grade_nat"),
    ("224.0.0.1", "multicast"),
    ("239.255.255.250", "multicast"),
    ("240.0.0.1", "reserved"),
    ("192.0.0.8", "reserved"),
    ("0.0.0.0", "unspecified"),
    ("0.1.2.3", "this_network"),
    ("255.255.255.255", "broadcast"),
    ("192.0.2.1", "documentation"),
    ("198.51.100.1", "documentation"),
    ("203.0.113.1", "documentation"),
    ("198.18.0.1", "benchmarking"),
    ("198.19.255.1", "benchmarking"),
    ("169.254.169.254", "metadata"),
    ("100.100.100.200", "metadata"),
    # IPv6
    ("::1", "loopback"),
    ("::", "unspecified"),
    ("fc00::1", "private"),
    ("fd12:3456::1", "private"),
    ("fe80::1", "link_local"),
    ("ff02::1", "multicast"),
    ("2001:db8::1", "documentation"),
    ("2001:2::1", "benchmarking"),
    ("fd00:ec2::254", "metadata"),
    ("100::1", "reserved"),
    ("::127.0.0.1", "reserved"),  # deprecated IPv4-compatible
    # IPv6 forms embedding IPv4, judged by the embedded address
    ("::ffff:127.0.0.1", "loopback"),
    ("::ffff:10.1.2.3", "private"),
    ("::ffff:169.254.169.254", "metadata"),
    ("::ffff:0.0.0.0", "unspecified"),
    ("64:ff9b::7f00:1", "loopback"),
    ("64:ff9b::a9fe:a9fe", "metadata"),
    ("64:ff9b::c0a8:101", "private"),
    ("64:ff9b:1::7f00:1", "loopback"),
    ("2002:7f00:1::", "loopback"),
    ("2002:a9fe:a9fe::1", "metadata"),
    ("2002:c0a8:101::1", "private"),
    # Teredo: server 127.0.0.1; client obfuscated (XOR) from 93.184.215.14
    ("2001:0:7f00:1:0:0:a247:28f1", "loopback"),
    # Teredo: server public 93.184.215.14; client 10.0.0.1 (obfuscated f5ff:fffe)
    ("2001:0:5db8:d70e:0:0:f5ff:fffe", "private"),
]


@pytest.mark.parametrize(("address", "category"), BLOCKED)
def test_blocked_addresses(address, category):
    assert address_allowed(ipaddress.ip_address(address), []) == (False, category)


PUBLIC = [
    "93.184.215.14",
    "1.1.1.1",
    "8.8.8.8",
    "2606:4700::1111",
    "2a00:1450:4001:80b::200e",
    "::ffff:93.184.215.14",
    "64:ff9b::5db8:d70e",
    "2002:5db8:d70e::1",
    "2001:0:5db8:d70e:0:0:a247:28f1",  # Teredo, server and client both 93.184.215.14
]


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_allowed(address):
    assert address_allowed(ipaddress.ip_address(address), []) == (True, "public")


@pytest.mark.parametrize("address", ["127.0.0.1", "127.1.2.3", "::ffff:127.0.0.1", "64:ff9b::7f00:1", "2002:7f00:1::"])
def test_allowed_networks_open_loopback(address):
    assert address_allowed(ipaddress.ip_address(address), LOOPBACK_NET) == (True, "allowed")


@pytest.mark.parametrize(
    ("address", "category"), [("10.0.0.1", "private"), ("::1", "loopback"), ("169.254.169.254", "metadata")]
)
def test_allowed_networks_open_only_what_is_listed(address, category):
    assert address_allowed(ipaddress.ip_address(address), LOOPBACK_NET) == (False, category)


def test_metadata_stays_blocked_even_if_its_network_is_allowed():
    allowed = [ipaddress.ip_network("169.254.0.0/16")]
    assert address_allowed(ipaddress.ip_address("169.254.1.1"), allowed) == (True, "allowed")
    assert address_allowed(ipaddress.ip_address("169.254.169.254"), allowed) == (False, "metadata")


# --------------------------------------------------------------------------------------
# resolve_and_check
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "host", ["127.0.0.1", "2130706433", "0x7f000001", "0177.0.0.1", "127.1", "::1", "::ffff:127.0.0.1"]
)
def test_encoded_loopback_forms_refused_via_real_resolver(host):
    # Sanity: the real resolver does turn these into loopback (it accepts the encoding).
    infos = socket.getaddrinfo(host, 80, socket.AF_UNSPEC, socket.SOCK_STREAM)
    assert infos and all(
        ipaddress.ip_address(i[4][0]).is_loopback or ipaddress.ip_address(i[4][0]).ipv4_mapped for i in infos
    )
    with pytest.raises(BlockedTarget) as exc:
        resolve_and_check(host, 80, allowed_networks=[])
    assert exc.value.reason == "ssrf_blocked"
    assert "loopback" in exc.value.detail


def test_encoded_loopback_allowed_when_network_opened():
    addrs = resolve_and_check("0x7f000001", 8080, allowed_networks=LOOPBACK_NET)
    assert addrs == [(socket.AF_INET, ("127.0.0.1", 8080))]


def _stub_resolver(*addresses, calls=None):
    def resolve(host, port, family=0, type=0, proto=0, flags=0):
        if calls is not None:
            calls.append(host)
        out = []
        for addr in addresses:
            ip = ipaddress.ip_address(addr)
            if ip.version == 4:
                out.append((socket.AF_INET, socket.SOCK_STREAM, 6, "", (addr, port)))
            else:
                out.append((socket.AF_INET6, socket.SOCK_STREAM, 6, "", (addr, port, 0, 0)))
        return out

    return resolve


def test_dns_rebinding_public_then_loopback_refused():
    resolver = _stub_resolver("93.184.215.14", "127.0.0.1")
    with pytest.raises(BlockedTarget) as exc:
        resolve_and_check("rebind.example", 443, allowed_networks=[], resolver=resolver)
    assert exc.value.reason == "ssrf_blocked"
    assert "loopback" in exc.value.detail


@pytest.mark.parametrize(
    ("address", "category"), [("10.20.30.40", "private"), ("fd12:3456::7", "private"), ("169.254.169.254", "metadata")]
)
def test_a_refusal_names_the_class_of_address_and_only_the_log_has_the_address(address, category, caplog):
    with pytest.raises(BlockedTarget) as exc:
        resolve_and_check("internal.example", 443, resolver=_stub_resolver(address))

    # The message reaches the tenant (the run's error): what the name resolves to is not theirs.
    assert exc.value.detail == f"'internal.example' resolves to a refused address ({category})"
    assert address not in str(exc.value)
    assert address in caplog.text


def test_any_blocked_address_among_many_refuses():
    resolver = _stub_resolver("2606:4700::1111", "93.184.215.14", "fd00:ec2::254")
    with pytest.raises(BlockedTarget, match="metadata"):
        resolve_and_check("multi.example", 80, allowed_networks=[], resolver=resolver)


def test_public_addresses_returned_in_order():
    resolver = _stub_resolver("2606:4700::1111", "93.184.215.14", "93.184.215.14")
    assert resolve_and_check("ok.example", 443, allowed_networks=[], resolver=resolver) == [
        (socket.AF_INET6, ("2606:4700::1111", 443, 0, 0)),
        (socket.AF_INET, ("93.184.215.14", 443)),
    ]


@pytest.mark.parametrize("port", [0, 65536, -1])
def test_resolve_rejects_bad_port(port):
    with pytest.raises(BlockedTarget) as exc:
        resolve_and_check("127.0.0.1", port, allowed_networks=LOOPBACK_NET)
    assert exc.value.reason == "invalid_url"


# --------------------------------------------------------------------------------------
# check_url
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://example.com", ParsedTarget("http", "example.com", 80, "/")),
        ("https://Example.COM/a/b?x=1&y=2#frag", ParsedTarget("https", "example.com", 443, "/a/b?x=1&y=2")),
        ("HTTPS://example.com:8443/p#", ParsedTarget("https", "example.com", 8443, "/p")),
        ("http://[2606:4700::1111]:8080/x", ParsedTarget("http", "2606:4700::1111", 8080, "/x")),
        ("http://bücher.de/", ParsedTarget("http", "xn--bcher-kva.de", 80, "/")),
        ("http://93.184.215.14:65535/", ParsedTarget("http", "93.184.215.14", 65535, "/")),
    ],
)
def test_check_url_accepts(url, expected):
    assert check_url(url) == expected


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("ftp://example.com/file", "ssrf_blocked"),
        ("file:///etc/passwd", "ssrf_blocked"),
        ("gopher://127.0.0.1:6379/_", "ssrf_blocked"),
        ("example.com/path", "ssrf_blocked"),
        ("http://user:pw@example.com/", "ssrf_blocked"),
        ("http://user@example.com/", "ssrf_blocked"),
        ("http://@example.com/", "ssrf_blocked"),
        ("http://[::1]:0/", "invalid_url"),
        ("http://example.com:0/", "invalid_url"),
        ("http://example.com:65536/", "invalid_url"),
        ("http://example.com:99999/", "invalid_url"),
        ("http://example.com:abc/", "invalid_url"),
        ("http://example.com:/", "invalid_url"),
        ("http:///path", "invalid_url"),
        ("http://", "invalid_url"),
        ("http:example.com", "invalid_url"),
        ("http://:80/", "invalid_url"),
        ("http://[::1/", "invalid_url"),
        ("http://[fe80::1%25eth0]/", "invalid_url"),
        ("http://\u2488.com/", "invalid_url"),  # nameprep maps it to "1." -> empty label
        ("http://" + "\u00fc" * 70 + ".com/", "invalid_url"),  # label too long
        ("http://a..b/", "invalid_url"),
        ("http://exa mple.com/", "invalid_url"),
        ("http://example.com\\@evil/", "invalid_url"),
        ("http://exa%6dple.com/", "invalid_url"),
        ("", "invalid_url"),
    ],
)
def test_check_url_refuses(url, reason):
    with pytest.raises(BlockedTarget) as exc:
        check_url(url)
    assert exc.value.reason == reason


@pytest.mark.parametrize(
    ("url", "path_and_query"),
    [
        ("http://example.com?q=1", "/?q=1"),
        ("http://example.com#f?x", "/"),
        ("http://example.com/p?#", "/p"),
        ("http://example.com/p#f?x", "/p"),
        ("http://example.com?a#b", "/?a"),
        ("http://example.com/a?b?c#d#e", "/a?b?c"),
        ("http://example.com//x/../y;z", "//x/../y;z"),
        ("http://example.com:8080/p:q@r", "/p:q@r"),
    ],
)
def test_check_url_parts_path_and_query_as_urlsplit_does(url, path_and_query):
    parts = urlsplit(url)
    assert (
        check_url(url).path_and_query
        == path_and_query
        == (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    )


def test_check_url_vets_an_origin_once_and_a_refusal_every_time():
    _checked_origin.cache_clear()
    targets = [check_url(f"https://Hooks.Example.com:8443/hook/{n}?n={n}") for n in range(50)]
    assert _checked_origin.cache_info().misses == 1
    assert {(t.scheme, t.host, t.port) for t in targets} == {("https", "hooks.example.com", 8443)}
    assert [t.path_and_query for t in targets] == [f"/hook/{n}?n={n}" for n in range(50)]
    for _ in range(2):
        with pytest.raises(BlockedTarget, match="credentials"):
            check_url("http://user@example.com/hook")
    assert _checked_origin.cache_info().misses == 3


# --------------------------------------------------------------------------------------
# connect_checked, against a real listener on 127.0.0.1 only
# --------------------------------------------------------------------------------------


class Listener:
    """A listener on 127.0.0.1 that records the peer address of each connection it accepts,
    in the order the kernel queued them."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.peers = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    @property
    def accepted(self):
        return len(self.peers)

    def _run(self):
        while not self._stop.is_set():
            try:
                conn, peer = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            self.peers.append(peer)
            conn.close()

    def accepted_before_marker(self):
        """The connections accepted before a marker connection made now: a connection made
        earlier finished its handshake earlier, so the listen queue hands it out first. No
        time to wait out: the marker's arrival bounds the check."""
        marker = socket.create_connection(("127.0.0.1", self.port), timeout=2)
        try:
            mine = marker.getsockname()
            assert _wait_for(lambda: mine in self.peers), "the marker connection was never accepted"
            return self.peers[: self.peers.index(mine)]
        finally:
            marker.close()

    def close(self):
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()


@pytest.fixture
def listener():
    lst = Listener()
    yield lst
    lst.close()


def _wait_for(predicate, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "2130706433"])
def test_connect_refused_by_default(listener, host):
    with pytest.raises(BlockedTarget) as exc:
        connect_checked(host, listener.port, timeout=2, allowed_networks=[])
    assert exc.value.reason == "ssrf_blocked"
    assert listener.accepted_before_marker() == []


def test_connect_allowed_when_loopback_opened(listener):
    sock = connect_checked("127.0.0.1", listener.port, timeout=2, allowed_networks=LOOPBACK_NET)
    try:
        assert sock.getpeername() == ("127.0.0.1", listener.port)
        assert sock.gettimeout() == 2
    finally:
        sock.close()
    assert len(listener.accepted_before_marker()) == 1


def test_connect_rebinding_stub_never_connects(listener):
    resolver = _stub_resolver("93.184.215.14", "127.0.0.1")
    with pytest.raises(BlockedTarget):
        connect_checked("rebind.example", listener.port, timeout=2, allowed_networks=[], resolver=resolver)
    assert listener.accepted_before_marker() == []


def _closed_port():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # bound but never listened: connecting is refused
    return port


def test_connect_uses_checked_address_and_falls_through(listener):
    """Resolved once; a refused first address falls through to the next checked one."""
    dead = _closed_port()
    calls = []

    def resolver(host, port, family=0, type=0, proto=0, flags=0):
        calls.append(host)
        return [
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", dead)),
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", listener.port)),
        ]

    sock = connect_checked(
        "svc.internal.test", listener.port, timeout=2, allowed_networks=LOOPBACK_NET, resolver=resolver
    )
    try:
        assert sock.getpeername() == ("127.0.0.1", listener.port)
    finally:
        sock.close()
    assert calls == ["svc.internal.test"]
    assert _wait_for(lambda: listener.accepted == 1)


def test_connect_raises_last_error_when_nothing_connects():
    dead = _closed_port()
    with pytest.raises(ConnectionRefusedError):
        connect_checked("127.0.0.1", dead, timeout=2, allowed_networks=LOOPBACK_NET)
