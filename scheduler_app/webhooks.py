"""The receivers' import, kept where the README has always pointed them: verify() and
InvalidSignature check a Standard Webhooks signature (standard library only). The signing
itself lives with the rest of outgoing HTTP, in http/signing.py."""

from scheduler_app.http.signing import InvalidSignature, verify

__all__ = ["InvalidSignature", "verify"]
