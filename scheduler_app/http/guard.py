"""SSRF guard for the HTTP jobs the scheduler calls on behalf of tenants.

No Django imports: settings (the explicit allow-list) are passed in as arguments. A refusal
names the class of address it met ("loopback", "private"), never the address: the message
reaches the tenant; the address goes to the log.

The flow for one request is::

    target = check_url(url)                      # syntax/policy: scheme, credentials, host, port
    sock = connect_checked(target.host, target.port, timeout=..., allowed_networks=...)
    # ... the HTTP client then speaks over `sock`, keeping Host / TLS SNI = target.host

The address check is done on what the resolver actually returns, so literal IPs and the
odd encodings the system resolver accepts (``2130706433``, ``0x7f000001``, ``0177.0.0.1``,
``127.1``) are caught, and every resolved address must pass (a name answering a public
address and a loopback one is refused as a whole).  The socket is connected to the very
address that was checked; the name is never resolved a second time.
"""

from __future__ import annotations

import functools
import ipaddress
import logging
import re
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

logger = logging.getLogger(__name__)

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

SSRF_BLOCKED = "ssrf_blocked"
INVALID_URL = "invalid_url"

ALLOWED_SCHEMES = {"http": 80, "https": 443}


class BlockedTarget(Exception):
    """The target may not be called. ``reason`` is "ssrf_blocked" or "invalid_url"."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class ParsedTarget:
    scheme: str  # "http" or "https"
    host: str  # ASCII (IDNA-encoded) lower-case name, or an IP literal without brackets
    port: int
    path_and_query: str  # always starts with "/"; the fragment is dropped


# --------------------------------------------------------------------------------------
# URL checks
# --------------------------------------------------------------------------------------

_HOST_CHARS = re.compile(r"^[a-z0-9_-]+$")
_FORBIDDEN_URL_CHARS = re.compile(r"[\x00-\x20\x7f\\]")


def _invalid(detail: str) -> BlockedTarget:
    return BlockedTarget(INVALID_URL, detail)


def _check_hostname(host: str) -> str:
    """Return the ASCII form of a DNS host name, or raise BlockedTarget(invalid_url)."""
    try:
        ascii_host = host.encode("idna").decode("ascii").lower()
    except UnicodeError as exc:
        raise _invalid(f"host is not valid IDNA: {host!r}") from exc
    labels = ascii_host[:-1].split(".") if ascii_host.endswith(".") else ascii_host.split(".")
    # Re-validate the result: nameprep may map characters to "." or to empty strings
    # (e.g. "\u2488" -> "1."), which the codec does not reject by itself.
    if not ascii_host or len(ascii_host) > 253:
        raise _invalid(f"bad host name length: {host!r}")
    for label in labels:
        if not label or len(label) > 63 or not _HOST_CHARS.match(label):
            raise _invalid(f"bad host name: {host!r}")
    return ascii_host


def check_url(url: str) -> ParsedTarget:
    """Parse and vet a job URL; raise BlockedTarget on anything not allowed."""
    if not isinstance(url, str) or not url:
        raise _invalid("empty URL")
    if _FORBIDDEN_URL_CHARS.search(url):
        raise _invalid("URL contains whitespace, control characters or backslashes")
    # What is vetted (scheme, credentials, host, port) is all in the URL's origin, before
    # its path, query or fragment: each origin is vetted once and kept, so that a
    # thousand jobs calling one host under a thousand paths parse and vet it once.
    scheme_end = url.find("://")
    origin_end = _ORIGIN_END.search(url, scheme_end + 3) if scheme_end > 0 else None
    if origin_end is None:
        return _check_url(url)
    origin = _checked_origin(url[: origin_end.start()])
    return ParsedTarget(origin.scheme, origin.host, origin.port, _path_and_query(url[origin_end.start() :]))


_ORIGIN_END = re.compile(r"[/?#]")  # where urlsplit ends a URL's netloc


@functools.lru_cache(maxsize=4096)
def _checked_origin(origin: str) -> ParsedTarget:
    """_check_url(origin), kept (a refusal is not: it raises again each time)."""
    return _check_url(origin)


def _path_and_query(rest: str) -> str:
    """What follows a URL's netloc as urlsplit parts it and check_url joins it (the
    fragment dropped, an empty path made "/")."""
    path, _, query = rest.partition("#")[0].partition("?")
    return (path or "/") + (f"?{query}" if query else "")


def _check_url(url: str) -> ParsedTarget:
    """check_url once its characters passed: the whole URL parsed and vetted."""
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise _invalid(f"unparsable URL: {exc}") from exc

    scheme = parts.scheme.lower()
    if scheme not in ALLOWED_SCHEMES:
        raise BlockedTarget(SSRF_BLOCKED, f"scheme {scheme or '(none)'!r} is not allowed")
    netloc = parts.netloc
    if not netloc:
        raise _invalid("URL has no host")
    if "@" in netloc or parts.username is not None or parts.password is not None:
        raise BlockedTarget(SSRF_BLOCKED, "credentials in the URL are not allowed")

    try:
        port = parts.port
    except ValueError as exc:
        raise _invalid(f"bad port: {exc}") from exc
    if port is None:
        if netloc.endswith(":"):
            raise _invalid("empty port")
        port = ALLOWED_SCHEMES[scheme]
    if not 1 <= port <= 65535:
        raise _invalid(f"port {port} outside 1..65535")

    host = parts.hostname or ""
    if not host:
        raise _invalid("URL has no host")
    if netloc.startswith("["):
        # Bracketed IPv6 literal; zone ids ("%eth0") are refused.
        try:
            addr = ipaddress.IPv6Address(host)
        except ValueError as exc:
            raise _invalid(f"bad IPv6 literal: {host!r}") from exc
        if addr.scope_id:
            raise _invalid("IPv6 zone ids are not allowed")
        host = addr.compressed
    else:
        host = _check_hostname(host)

    path = parts.path or "/"
    if not path.startswith("/"):
        raise _invalid("path must be absolute")
    path_and_query = path + (f"?{parts.query}" if parts.query else "")
    return ParsedTarget(scheme=scheme, host=host, port=port, path_and_query=path_and_query)


# --------------------------------------------------------------------------------------
# Address checks
# --------------------------------------------------------------------------------------


def _nets(category: str, *cidrs: str) -> list[tuple[IPNetwork, str]]:
    return [(ipaddress.ip_network(c), category) for c in cidrs]


# Order matters: the first match gives the category (metadata before link-local, etc.).
_V4_BLOCKED: list[tuple[IPNetwork, str]] = [
    *_nets("metadata", "169.254.169.254/32", "100.100.100.200/32"),
    *_nets("unspecified", "0.0.0.0/32"),
    *_nets("this_network", "0.0.0.0/8"),
    *_nets("broadcast", "255.255.255.255/32"),
    *_nets("loopback", "127.0.0.0/8"),
    *_nets("private", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"),
    *_nets("link_local", "169.254.0.0/16"),
    *_nets("carrier_grade_nat", "100.64.0.0/10"),
    *_nets("multicast", "224.0.0.0/4"),
    *_nets("documentation", "192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24"),
    *_nets("benchmarking", "198.18.0.0/15"),
    *_nets("reserved", "240.0.0.0/4", "192.0.0.0/24", "192.88.99.0/24"),
]

_V6_BLOCKED: list[tuple[IPNetwork, str]] = [
    *_nets("metadata", "fd00:ec2::254/128"),
    *_nets("unspecified", "::/128"),
    *_nets("loopback", "::1/128"),
    *_nets("link_local", "fe80::/10"),
    *_nets("private", "fc00::/7", "fec0::/10"),
    *_nets("multicast", "ff00::/8"),
    *_nets("documentation", "2001:db8::/32", "3fff::/20"),
    *_nets("benchmarking", "2001:2::/48"),
    # ::/8 covers IPv4-compatible ::a.b.c.d and SIIT ::ffff:0:a.b.c.d; 100::/64 is discard-only.
    *_nets("reserved", "::/8", "100::/64"),
]

_MAPPED = ipaddress.ip_network("::ffff:0:0/96")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")
_SIXTOFOUR = ipaddress.ip_network("2002::/16")
_TEREDO = ipaddress.ip_network("2001::/32")


def _v4(value: int) -> ipaddress.IPv4Address:
    return ipaddress.IPv4Address(value & 0xFFFFFFFF)


def embedded_ipv4(ip: IPAddress) -> tuple[str, list[ipaddress.IPv4Address]] | None:
    """For IPv6 forms that carry an IPv4 address, return (form, [candidate IPv4s])."""
    if ip.version != 6:
        return None
    n = int(ip)
    if ip in _MAPPED:
        return "ipv4_mapped", [_v4(n)]
    if ip in _NAT64:
        return "nat64", [_v4(n)]
    if ip in _NAT64_LOCAL:
        # RFC 8215 local-use prefix: the translator may use any RFC 6052 prefix length
        # inside it, so judge both plausible layouts (/96 suffix and the /48 layout, which
        # skips the reserved "u" octet at bits 64..71).
        rfc6052_48 = (((n >> 64) & 0xFFFF) << 16) | ((n >> 40) & 0xFFFF)
        return "nat64", [_v4(n), _v4(rfc6052_48)]
    if ip in _SIXTOFOUR:
        return "6to4", [_v4(n >> 80)]
    if ip in _TEREDO:
        teredo = ip.teredo
        assert teredo is not None  # ip is in 2001::/32, Teredo's prefix
        server, client = teredo  # client is the de-obfuscated (XORed) address
        return "teredo", [server, client]
    return None


def _strip_scope(ip: IPAddress) -> IPAddress:
    if ip.version == 6 and ip.scope_id:
        return ipaddress.IPv6Address(str(ip).split("%", 1)[0])
    return ip


def _in_any(ip: IPAddress, networks: Sequence[IPNetwork]) -> bool:
    return any(ip.version == net.version and ip in net for net in networks)


def _classify_plain(ip: IPAddress) -> str | None:
    """Category of a blocked address (ignoring embedded forms), or None if it is public."""
    table = _V4_BLOCKED if ip.version == 4 else _V6_BLOCKED
    for net, category in table:
        if ip in net:
            return category
    if not ip.is_global:
        # Safety net for special-purpose ranges not listed above (e.g. other 2001::/23).
        return "non_global"
    return None


def address_allowed(ip: IPAddress, allowed_networks: Sequence[IPNetwork] = ()) -> tuple[bool, str]:
    """Judge one address. Returns (True, "public"|"allowed") or (False, category).

    ``allowed_networks`` opens the listed networks explicitly (matched against the address
    and, for IPv6 forms that embed an IPv4 address, against the embedded address). Cloud
    metadata addresses stay blocked even inside an allowed network.
    """
    if isinstance(ip, str):
        ip = ipaddress.ip_address(ip)
    ip = _strip_scope(ip)
    embedded = embedded_ipv4(ip)
    candidates: list[IPAddress] = [ip] + (list(embedded[1]) if embedded else [])

    for candidate in candidates:
        if _classify_plain(candidate) == "metadata":
            return False, "metadata"

    if _in_any(ip, allowed_networks):
        return True, "allowed"
    if embedded and all(_in_any(v4, allowed_networks) for v4 in embedded[1]):
        return True, "allowed"

    if embedded:
        form, v4s = embedded
        for v4 in v4s:
            category = _classify_plain(v4)
            if category is not None:
                return False, category
        # Every embedded IPv4 is public: the mapping/translation prefix itself is not
        # an internal range, so the address is allowed.
        return True, "public"

    category = _classify_plain(ip)
    if category is not None:
        return False, category
    return True, "public"


def literal_address(host: str) -> IPAddress | None:
    """The address a host (as check_url gives it) is written as, or None for a name: an IPv6
    literal, or any IPv4 form the system resolver reads as a number without asking DNS
    (dotted, decimal ``2130706433``, octal ``0177.0.0.1``, hex ``0x7f.1``, short ``127.1``)."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    try:
        # inet_aton's reading of a number is getaddrinfo's (glibc tries it before DNS).
        return ipaddress.IPv4Address(socket.inet_aton(host))
    except OSError:
        return None


def literal_refusal(host: str, allowed_networks: Sequence[str | IPNetwork] = ()) -> str | None:
    """The class of address ("loopback", "private", "metadata"...) that refuses a host written
    as an address at every call, so that it can be refused when saved; None for a name (judged
    on what it resolves to, at each call) or an allowed address."""
    address = literal_address(host)
    if address is None:
        return None
    networks = [ipaddress.ip_network(net) if isinstance(net, str) else net for net in allowed_networks]
    allowed, category = address_allowed(address, networks)
    return None if allowed else category


# --------------------------------------------------------------------------------------
# Resolution and connection
# --------------------------------------------------------------------------------------

Resolver = Callable[..., list]
Addr = tuple[int, tuple]


def resolve_and_check(
    host: str,
    port: int,
    *,
    allowed_networks: Sequence[IPNetwork] = (),
    resolver: Resolver = socket.getaddrinfo,
) -> list[Addr]:
    """Resolve ``host`` and check every address; return [(family, sockaddr), ...].

    Raises BlockedTarget(ssrf_blocked) if ANY resolved address is blocked (a name that
    answers both a public and an internal address is refused as a whole). Resolver
    errors (socket.gaierror) propagate unchanged.
    """
    check_port(host, port)
    return check_resolved(host, resolver(host, port, socket.AF_UNSPEC, socket.SOCK_STREAM), allowed_networks)


def check_port(host: str, port: int) -> None:
    """What resolve_and_check refuses before it resolves anything."""
    if not isinstance(port, int) or not 1 <= port <= 65535:
        raise _invalid(f"port {port!r} outside 1..65535")
    if not host:
        raise _invalid("empty host")


def check_resolved(host: str, infos: list, allowed_networks: Sequence[IPNetwork] = ()) -> list[Addr]:
    """Check every address getaddrinfo answered for ``host`` (its tuples as given, from
    socket.getaddrinfo or the event loop's); the checked [(family, sockaddr), ...] in order.
    The one judge of resolved addresses for the blocking client and the concurrent one."""
    if not infos:
        raise socket.gaierror(socket.EAI_NONAME, f"no addresses for {host!r}")

    checked: list[Addr] = []
    seen: set[tuple] = set()
    for info in infos:
        family, sockaddr = info[0], info[4]
        # The messages name the address's class, never the address: they reach the tenant
        # (the run's error), and what internal names resolve to is not theirs to learn.
        # The operator's log has the address.
        if family not in (socket.AF_INET, socket.AF_INET6):
            logger.warning("HTTP job host %r resolved to address family %r: refused", host, family)
            raise BlockedTarget(SSRF_BLOCKED, f"{host!r} resolves to an unsupported address family")
        try:
            ip = ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])
        except ValueError as exc:
            logger.warning("HTTP job host %r resolved to unparsable %r: refused", host, sockaddr)
            raise BlockedTarget(SSRF_BLOCKED, f"{host!r} resolves to an unparsable address") from exc
        ok, category = address_allowed(ip, allowed_networks)
        if not ok:
            logger.warning("HTTP job host %r resolves to %s (%s): refused", host, ip, category)
            raise BlockedTarget(SSRF_BLOCKED, f"{host!r} resolves to a refused address ({category})")
        key = (family, tuple(sockaddr))
        if key not in seen:
            seen.add(key)
            checked.append((family, tuple(sockaddr)))
    return checked


def connect_checked(
    host: str,
    port: int,
    *,
    timeout: float,
    allowed_networks: Sequence[IPNetwork] = (),
    resolver: Resolver = socket.getaddrinfo,
) -> socket.socket:
    """Resolve and check ``host``, then connect to a checked address (never re-resolving).

    Addresses are tried in resolver order; on a connection failure the next one is tried.
    ``timeout`` bounds the whole attempt and is left set on the returned socket. Raises
    BlockedTarget if the host is blocked, or the last OSError if no address connected.
    """
    addrs = resolve_and_check(host, port, allowed_networks=allowed_networks, resolver=resolver)
    deadline = time.monotonic() + timeout
    last_error: OSError | None = None
    for family, sockaddr in addrs:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            last_error = last_error or TimeoutError(f"connect to {host!r} timed out")
            break
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.settimeout(remaining)
            sock.connect(sockaddr)
        except OSError as exc:
            sock.close()
            last_error = exc
            continue
        sock.settimeout(timeout)
        return sock
    assert last_error is not None
    raise last_error
