"""scheduler_app.http.client over HTTPS against a loopback TLS server whose self-signed
certificate the openssl program makes (127.0.0.1 only; the servers and `call` are
tests/unit/http/test_http_client.py's)."""

from __future__ import annotations

import socket

import pytest

from scheduler_app.http import client as httpclient
from scheduler_app.http.client import HttpConnectionError
from tests.unit.http.test_http_client import call, raw_server  # noqa: F401 (raw_server: a fixture)


@pytest.fixture
def tls_server(raw_server, tmp_path):
    """A TLS server with a self-signed certificate for hooks.example.test."""
    import shutil
    import ssl
    import subprocess

    if shutil.which("openssl") is None:
        pytest.skip("openssl CLI not available")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=hooks.example.test",
            "-addext",
            "subjectAltName=DNS:hooks.example.test",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)

    def behaviour(conn, server):
        conn.settimeout(2)
        try:
            tls = context.wrap_socket(conn, server_side=True)
        except (ssl.SSLError, OSError):
            return
        with tls:
            while b"\r\n\r\n" not in server.received:
                data = tls.recv(4096)
                if not data:
                    return
                server.received += data
            tls.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nTLS")

    server = raw_server(behaviour)
    server.cafile = str(cert)
    return server


def _to_loopback(host, port_, family, type_):
    return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port_))]


def test_https_verifies_the_certificate(tls_server):
    # Self-signed and not trusted: verification is on, so this fails before any HTTP.
    with pytest.raises(HttpConnectionError, match="CERTIFICATE_VERIFY_FAILED"):
        call("GET", f"https://hooks.example.test:{tls_server.port}/x", resolver=_to_loopback)
    assert b"GET" not in tls_server.received


def test_https_with_trusted_certificate(tls_server, monkeypatch):
    import ssl

    original = ssl.create_default_context

    def trusting(*args, **kwargs):
        context = original(*args, **kwargs)
        context.load_verify_locations(cafile=tls_server.cafile)
        return context

    monkeypatch.setattr(httpclient.ssl, "create_default_context", trusting)

    result = call("GET", f"https://hooks.example.test:{tls_server.port}/x", resolver=_to_loopback)
    assert (result.status, result.body) == (200, b"TLS")
    assert f"Host: hooks.example.test:{tls_server.port}".encode() in bytes(tls_server.received)

    # The certificate is for hooks.example.test only: another name fails verification.
    with pytest.raises(HttpConnectionError):
        call("GET", f"https://other.example.test:{tls_server.port}/x", resolver=_to_loopback)
