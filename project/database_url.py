"""Database settings from a URL: what dj-database-url reads, plus the multi-host forms libpq
documents for PostgreSQL, so that a standby promoted in the primary's place is found again:

- the URI form, each host with its port:
  `postgres://user@db1:5432,db2:5432/cronfleet?target_session_attrs=read-write`
- the keyword form: `host=db1,db2 port=5432 dbname=cronfleet user=user target_session_attrs=read-write`
  (one port for every host, or one per host)
- the query form some drivers use: `postgres://user@/cronfleet?host=db1,db2&port=5432,5432`

libpq tries the hosts in order and, with `target_session_attrs=read-write`, keeps the first
that accepts writes. A list that libpq would read otherwise than it looks is refused, naming
the problem: in `db1,db2:5442` only db2 has the port (db1 gets 5432), and three ports for two
hosts is no list at all.
"""

from __future__ import annotations

import re

import dj_database_url

POSTGRES_SCHEMES = ("postgres", "postgresql", "pgsql", "postgis")
_KEYWORD_FORM = re.compile(r"^\s*[a-z_]+\s*=")  # `host=...`: a libpq keyword/value string
_FIELDS = {"dbname": "NAME", "user": "USER", "password": "PASSWORD", "host": "HOST", "port": "PORT"}


class DatabaseURLError(ValueError):
    """The URL cannot be read, or its hosts and ports are ambiguous; the message says why."""


def parse(url: str, *, conn_max_age: int) -> dict:
    """Django's settings for one database (ENGINE, NAME, USER, PASSWORD, HOST, PORT, OPTIONS);
    several PostgreSQL hosts are kept as libpq's comma-separated HOST and PORT."""
    if _KEYWORD_FORM.match(url):
        return _keyword_form(url, conn_max_age)
    scheme, _, rest = url.partition("://")
    if scheme in POSTGRES_SCHEMES:
        end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
        userinfo, at, hosts = rest[:end].rpartition("@")
        if "," in hosts:
            host_list, ports = _uri_hosts(hosts)
            config = _dj_parse(f"{scheme}://{userinfo}{at}hosts{rest[end:]}", conn_max_age)
            config["HOST"], config["PORT"] = ",".join(host_list), ",".join(ports)
            _refuse_twice(config)
            return config
    config = _dj_parse(url, conn_max_age)
    if config["ENGINE"].startswith("django.db.backends.postgresql") or "postgis" in config["ENGINE"]:
        _hosts_from_query(config)
    return config


def _dj_parse(url: str, conn_max_age: int) -> dict:
    try:
        config = dj_database_url.parse(url, conn_max_age=conn_max_age)
    except ValueError as exc:
        raise DatabaseURLError(str(exc) or "not a database URL") from None
    config.setdefault("OPTIONS", {})
    return config


def _uri_hosts(text: str) -> tuple[list[str], list[str]]:
    """The hosts and ports of a URI's `a:1,b:2` list: every host with its port, or none."""
    hosts, ports = [], []
    for entry in text.split(","):
        if entry.startswith("["):  # [IPv6]:port
            host, _, tail = entry[1:].partition("]")
            port = tail.removeprefix(":") if tail.startswith(":") else None
            if tail and port is None:
                raise DatabaseURLError(f"cannot read the host {entry!r}")
        else:
            host, colon, port = entry.partition(":")
            port = port if colon else None
        if not host:
            raise DatabaseURLError(f"an empty host in the host list {text!r}")
        if port is not None and not _is_port(port):
            raise DatabaseURLError(f"the port of host {host!r} is not a port number: {port!r}")
        hosts.append(host)
        ports.append(port)
    with_port = [host for host, port in zip(hosts, ports) if port is not None]
    if with_port and len(with_port) != len(hosts):
        bare = [host for host, port in zip(hosts, ports) if port is None]
        raise DatabaseURLError(
            f"in the host list {text!r} only {', '.join(with_port)} has a port; libpq would give "
            f"{', '.join(bare)} the default port 5432: write every host with its port (or none)"
        )
    return hosts, [port for port in ports if port is not None]


def _is_port(text: str) -> bool:
    return text.isdigit() and 0 < int(text) < 65536


def _keyword_form(text: str, conn_max_age: int) -> dict:
    import psycopg.conninfo  # here: a URL (and SQLite) needs no libpq client at start-up

    try:
        values = psycopg.conninfo.conninfo_to_dict(text)
    except psycopg.ProgrammingError as exc:
        raise DatabaseURLError(f"not a libpq connection string: {exc}") from None
    config = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "",
        "USER": "",
        "PASSWORD": "",
        "HOST": "",
        "PORT": "",
        "CONN_MAX_AGE": conn_max_age,
    }
    options = {}
    for key, value in values.items():
        if key in _FIELDS:
            config[_FIELDS[key]] = str(value)
        else:
            options[key] = value
    config["OPTIONS"] = options
    _check_counts(config["HOST"], config["PORT"])
    return config


def _hosts_from_query(config: dict) -> None:
    """`?host=a,b&port=1,2`: the hosts as HOST and PORT, checked as the keyword form is."""
    options = config["OPTIONS"]
    if "host" in options or "port" in options:
        if config["HOST"] and "host" in options:
            raise DatabaseURLError("hosts are given twice: in the URL and in its host= parameter")
        config["HOST"] = str(options.pop("host", config["HOST"]))
        config["PORT"] = str(options.pop("port", config["PORT"]))
    _check_counts(config["HOST"], str(config["PORT"]))


def _refuse_twice(config: dict) -> None:
    if "host" in config["OPTIONS"] or "port" in config["OPTIONS"]:
        raise DatabaseURLError("hosts are given twice: in the URL and in its host= or port= parameter")


def _check_counts(host: str, port: str) -> None:
    """libpq's rule: one port for every host, or one per host."""
    hosts = host.split(",") if host else []
    ports = port.split(",") if port else []
    if any(not p.strip() or not _is_port(p.strip()) for p in ports):
        raise DatabaseURLError(f"not a port number in {port!r}")
    if len(ports) > 1 and len(ports) != max(len(hosts), 1):
        raise DatabaseURLError(
            f"{len(ports)} ports ({port}) for {len(hosts) or 1} hosts ({host or 'the default'}): "
            "give one port for every host, or one per host"
        )
