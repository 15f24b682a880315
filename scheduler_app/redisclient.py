"""Redis clients of the product (the API rate limits, the admin login throttle, the tests'
broker helpers) from a URL: redis://, rediss:// and unix:// as redis-py reads them, or
Redis Sentinel's `sentinel://host:port;sentinel://host2:port2` as kombu reads it for the broker.

A sentinel:// URL names the Sentinels, not a Redis: the client asks them for the master of
CRONFLEET_SENTINEL_MASTER and, after a failover, for the new one (redis-py's
Sentinel.master_for, whose connections re-ask on every reconnect). The database number, user
and password come from the first address, as kombu takes them; a later address naming another
database is refused by the settings (parse_sentinel_url) rather than silently ignored.

The broker's own connections (beats, workers, the queue depths of scheduler_app.queues) are
kombu's: its sentinel transport, configured by CELERY_BROKER_TRANSPORT_OPTIONS.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

SCHEME = "sentinel://"


class BadSentinelUrl(ValueError):
    pass


@dataclass(frozen=True)
class SentinelUrl:
    sentinels: list[tuple[str, int]]
    db: int
    username: str | None
    password: str | None


def is_sentinel(url: str) -> bool:
    return url.startswith(SCHEME)


def parse_sentinel_url(url: str) -> SentinelUrl:
    """The Sentinels' addresses, the database number and the credentials of a sentinel:// URL
    (`sentinel://[user:password@]host[:port][/db];sentinel://...`); BadSentinelUrl otherwise."""
    parts = [part for part in url.split(";") if part]
    sentinels, dbs = [], []
    for part in parts:
        if not is_sentinel(part):
            raise BadSentinelUrl(f"{part!r} is not a sentinel://host:port address (addresses are separated by ';')")
        split = urlsplit(part)
        try:
            port = split.port or 26379
        except ValueError:
            raise BadSentinelUrl(f"{part!r} has a port that is not a number") from None
        if not split.hostname:
            raise BadSentinelUrl(f"{part!r} names no host")
        sentinels.append((split.hostname, port))
        db = split.path.strip("/")
        if db and not db.isdigit():
            raise BadSentinelUrl(f"{part!r}: the database must be a number, got {db!r}")
        dbs.append(int(db) if db else None)
    if not sentinels:
        raise BadSentinelUrl("names no Sentinel")
    named = {db for db in dbs if db is not None}
    if named and (len(named) > 1 or dbs[0] is None):
        # kombu reads the database (and the credentials) from the first address only.
        raise BadSentinelUrl(
            f"give the database number on the first address (kombu reads it from there), "
            f"and the same on every other one; got {dbs}"
        )
    first = urlsplit(parts[0])
    return SentinelUrl(
        sentinels,
        dbs[0] or 0,
        unquote(first.username) if first.username else None,
        unquote(first.password) if first.password else None,
    )


def client_from_url(url: str, *, socket_timeout: float, socket_connect_timeout: float, **kwargs):
    """A redis.Redis for `url`: redis.Redis.from_url, or for sentinel:// the current master of
    CRONFLEET_SENTINEL_MASTER, found anew on each reconnect. `kwargs` go to the connections."""
    import redis  # here: the settings import this module, and need no Redis client to load

    if not is_sentinel(url):
        return redis.Redis.from_url(
            url, socket_timeout=socket_timeout, socket_connect_timeout=socket_connect_timeout, **kwargs
        )
    # Here, not at the top: the settings import this module's parser while they load.
    from redis.sentinel import Sentinel

    from scheduler_app.conf import app_settings

    parsed = parse_sentinel_url(url)
    ask = min(socket_timeout, socket_connect_timeout, app_settings.SENTINEL_TIMEOUT_SECONDS)
    sentinel = Sentinel(parsed.sentinels, sentinel_kwargs={"socket_timeout": ask, "socket_connect_timeout": ask})
    return sentinel.master_for(
        app_settings.SENTINEL_MASTER,
        db=parsed.db,
        username=parsed.username,
        password=parsed.password,
        socket_timeout=socket_timeout,
        socket_connect_timeout=socket_connect_timeout,
        **kwargs,
    )
