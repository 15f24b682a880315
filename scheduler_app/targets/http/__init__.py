"""HTTP jobs: what a job may be (config.py) and one attempt of it (perform.py): its Call
prepared from the job, sent by the blocking client or the worker's concurrent one, and its
answer classified. The client, the SSRF guard and the signing are outgoing HTTP's own room
(scheduler_app/http/), which alerts share.

prepare(), answer() and failure_of() are what the worker's runs in flight (worker/flight.py)
take of the target: the rest of their path is the http room's."""

from scheduler_app.targets.http.config import HTTP_METHODS, check
from scheduler_app.targets.http.perform import answer, failure_of, perform, prepare

__all__ = ["HTTP_METHODS", "answer", "check", "failure_of", "perform", "prepare"]
