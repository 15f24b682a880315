"""Outgoing HTTP, shared by the HTTP jobs (targets/http/), the worker's runs in flight
(worker/flight.py), alert deliveries (alerts/) and the tenants' secrets (services/): the
SSRF guard that refuses private and reserved addresses at every connection (guard.py), the
blocking client (client.py) and the concurrent one (aclient.py) with its connection pool
(pool.py), one attempt's request (call.py), Standard Webhooks signing (signing.py) and the
tenants' signing secrets, encrypted at rest (secrets.py)."""
