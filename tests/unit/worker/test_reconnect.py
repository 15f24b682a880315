"""The check of a worker's kept connection before a start (worker/reconnect.py), on
stand-ins: a socket pair for the server's side, a fake for Django's connection."""

import socket
from dataclasses import dataclass, field

import pytest

from scheduler_app.worker import reconnect


@dataclass
class Raw:
    """A psycopg connection as server_spoke() sees it: its socket and whether it is closed."""

    sock: socket.socket
    closed: bool = False

    def fileno(self) -> int:
        return self.sock.fileno()


@dataclass
class Wrapper:
    """Django's connection as drop_closed_connection() sees it."""

    connection: object | None
    vendor: str = "postgresql"
    in_atomic_block: bool = False
    usable: bool = True
    asked: list[str] = field(default_factory=list)

    def is_usable(self) -> bool:
        self.asked.append("is_usable")
        return self.usable

    def close(self) -> None:
        self.asked.append("close")
        self.connection = None


@pytest.fixture
def pair():
    ours, server = socket.socketpair()
    yield ours, server
    ours.close()
    server.close()


def test_an_idle_session_the_server_left_alone_has_not_spoken(pair):
    ours, _server = pair

    assert reconnect.server_spoke(Raw(ours)) is False


@pytest.mark.parametrize("server_does", ["sends a farewell", "closes", "both"])
def test_a_session_the_server_ended_has_spoken(pair, server_does):
    ours, server = pair

    if server_does != "closes":
        server.sendall(b"E...terminating connection due to administrator command")
    if server_does != "sends a farewell":
        server.close()

    assert reconnect.server_spoke(Raw(ours)) is True


def test_a_connection_psycopg_knows_is_closed_has_spoken(pair):
    assert reconnect.server_spoke(Raw(pair[0], closed=True)) is True


def test_a_quiet_session_is_kept_without_a_query(pair):
    conn = Wrapper(Raw(pair[0]))

    assert reconnect.drop_closed_connection(conn) is False
    assert conn.asked == []


def test_a_session_that_spoke_is_closed_when_it_no_longer_works(pair):
    ours, server = pair
    server.close()
    conn = Wrapper(Raw(ours), usable=False)

    assert reconnect.drop_closed_connection(conn) is True
    assert conn.asked == ["is_usable", "close"] and conn.connection is None


def test_a_session_that_spoke_and_still_works_is_kept(pair):
    ours, server = pair
    server.sendall(b"A...a NOTIFY")
    conn = Wrapper(Raw(ours))

    assert reconnect.drop_closed_connection(conn) is False
    assert conn.asked == ["is_usable"]


def test_nothing_is_checked_inside_a_transaction_or_without_a_connection(pair):
    pair[1].close()
    in_block = Wrapper(Raw(pair[0]), in_atomic_block=True, usable=False)
    never_connected = Wrapper(None)

    assert reconnect.drop_closed_connection(in_block) is False
    assert reconnect.drop_closed_connection(never_connected) is False
    assert in_block.asked == never_connected.asked == []


def test_other_databases_are_asked_with_their_own_check():
    conn = Wrapper(object(), vendor="mysql", usable=False)

    assert reconnect.drop_closed_connection(conn) is True
    assert conn.asked == ["is_usable", "close"]
