"""HTTP jobs: the job's URL called once per attempt, with its client (client.py), the SSRF
guard that refuses private and reserved addresses (guard.py), Standard Webhooks signing
(signing.py) with the tenant's secrets (secrets.py), and what a job may be (config.py)."""

from scheduler_app.targets.http.config import HTTP_METHODS, check
from scheduler_app.targets.http.perform import perform

__all__ = ["HTTP_METHODS", "check", "perform"]
