"""The concurrent client's TLS (scheduler_app/http/aclient.py) against a local HTTPS receiver whose
certificate a CA made here signs: verified against the name in the URL, not the address it
was handed, and refused when the name or the CA does not match."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import ssl
import time

import pytest
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from scheduler_app.http import aclient
from scheduler_app.http.call import Call
from scheduler_app.http.client import HttpConnectionError

LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"))


def _name(text: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, text)])


def make_ca_and_leaf(folder, dns_name: str):
    """A CA and a leaf certificate for `dns_name` it signs: (ca.pem, leaf.pem, leaf.key). The key
    identifiers are there because Python 3.13 verifies strictly (VERIFY_X509_STRICT)."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("cronfleet test CA"))
        .issuer_name(_name("cronfleet test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    leaf_key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder()
        .subject_name(_name(dns_name))
        .issuer_name(ca.subject)
        .public_key(leaf_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(dns_name)]), critical=False)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    paths = folder / "ca.pem", folder / "leaf.pem", folder / "leaf.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        leaf_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return paths


def call_to(url: str, host: str, port: int) -> Call:
    return Call(
        run_id=1,
        attempt=1,
        fire_key="job1@x",
        scheduled_at="",
        method="POST",
        url=url,
        host=("https", host, port),
        path="/hook",
        headers={},
        body=b"{}",
        secrets=(),
        timeout=5.0,
        max_response_bytes=1024,
        allowed_networks=LOOPBACK,
    )


async def post_once(cert_pem, key_pem, name: str):
    """Serve HTTPS on 127.0.0.1 with this certificate; send one attempt to https://<name>:port."""
    served = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    served.load_cert_chain(cert_pem, key_pem)
    seen = []

    async def answer(request):
        seen.append(request.headers.get("Host"))
        return web.Response(text="secure")

    app = web.Application()
    app.router.add_post("/hook", answer)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=served)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    http = aclient.session(connections=10)
    try:
        result = await aclient.request(
            http, call_to(f"https://{name}:{port}/hook", name, port), signed_headers={}, deadline=time.monotonic() + 5
        )
        return result, seen, port
    finally:
        await http.close()
        await runner.cleanup()


def test_tls_is_verified_against_the_urls_name_with_the_tests_ca(tmp_path, monkeypatch):
    ca, leaf, key = make_ca_and_leaf(tmp_path, "localhost")
    monkeypatch.setenv("SSL_CERT_FILE", str(ca))  # what ssl.create_default_context() trusts

    result, seen, port = asyncio.run(post_once(leaf, key, "localhost"))

    assert (result.status, result.body) == (200, b"secure")
    assert seen == [f"localhost:{port}"]  # Host keeps the name; the connection went to 127.0.0.1


def test_a_certificate_for_another_name_is_refused(tmp_path, monkeypatch):
    ca, leaf, key = make_ca_and_leaf(tmp_path, "other.example")
    monkeypatch.setenv("SSL_CERT_FILE", str(ca))

    with pytest.raises(HttpConnectionError, match="(?i)certificate"):
        asyncio.run(post_once(leaf, key, "localhost"))


def test_a_certificate_from_an_unknown_ca_is_refused(tmp_path, monkeypatch):
    _, leaf, key = make_ca_and_leaf(tmp_path, "localhost")
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "nothing.pem"))  # only the system's CAs, not ours

    with pytest.raises(HttpConnectionError, match="(?i)certificate"):
        asyncio.run(post_once(leaf, key, "localhost"))
