"""Server errors under an id: every uncaught exception in one of the app's pages is logged
once, with its traceback, under a short id ("server error <id>: GET /ping/..."), and the 500
answer carries the id (in its text and in X-Cronfleet-Error-Id), so an operator finds the log
line from what a client saw. The API does the same in its own shape (api/middleware.py).

- The app's own views (the check-ins, /healthz, /readyz, /metrics, the dashboard, the job
  console, a run's replay) are wrapped by answers_server_errors where they are defined: plain
  text for the machines' endpoints, a page for people. Nothing global: a host's other URLs
  keep their own handler500.
- The app's admin pages (its models', the job console) are routes of the host's admin site:
  record_server_error, a got_request_exception receiver, logs their exceptions under an id,
  and the 500 page is the site's own (Cronfleet's deployment names server_error as its
  handler500, which shows the id; a host may do the same).

Logged under "scheduler_app.web", so a project's LOGGING for "scheduler_app" sends it where
the rest of the app's records go (stderr, JSON lines in the deployment).
"""

from __future__ import annotations

import functools
import logging
import uuid

from django.conf import settings
from django.core.exceptions import BadRequest, PermissionDenied, SuspiciousOperation
from django.core.signals import got_request_exception
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseServerError
from django.http.multipartparser import MultiPartParserError
from django.template import loader

logger = logging.getLogger("scheduler_app.web")

ERROR_ID_HEADER = "X-Cronfleet-Error-Id"
# What Django answers 4xx for, not 500 (django.core.handlers.exception.response_for_exception).
CLIENT_ERRORS = (Http404, PermissionDenied, BadRequest, SuspiciousOperation, MultiPartParserError)
TEMPLATE = "scheduler_app/500.html"  # not "500.html": that name is the host's page


def log_server_error(request: HttpRequest) -> str:
    """Log the exception being handled under a new id, once per request (another receiver or
    the API's may have logged it already), and return the id."""
    error_id = getattr(request, "cronfleet_error_id", None)
    if error_id is None:
        error_id = request.cronfleet_error_id = uuid.uuid4().hex[:16]
        logger.error("server error %s: %s %s", error_id, request.method, request.path_info, exc_info=True)
    return error_id


def text_answer(error_id: str) -> HttpResponse:
    answer = HttpResponseServerError(
        f"internal error; it is logged as {error_id}\n", content_type="text/plain; charset=utf-8"
    )
    answer[ERROR_ID_HEADER] = error_id
    return answer


def page_answer(error_id: str) -> HttpResponse:
    # Rendered without the request, as Django's own server_error: a context processor that
    # fails (the database gone) must not fail the error page too.
    answer = HttpResponseServerError(loader.get_template(TEMPLATE).render({"error_id": error_id}))
    answer[ERROR_ID_HEADER] = error_id
    return answer


def answers_server_errors(view=None, *, text: bool = False):
    """Wrap one of the app's views: an exception Django would answer 500 for is logged under an
    id and answered with it (`text`: plain text, else the page), after telling Django's
    got_request_exception receivers (a host's error reporter). Under DEBUG the exception goes
    on to Django's technical page, logged under its id first."""

    def decorate(view):
        @functools.wraps(view)
        def wrapped(request, *args, **kwargs):
            try:
                return view(request, *args, **kwargs)
            except CLIENT_ERRORS:
                raise
            except Exception:
                error_id = log_server_error(request)
                if settings.DEBUG:
                    raise
                got_request_exception.send(sender=None, request=request)
                return text_answer(error_id) if text else page_answer(error_id)

        return wrapped

    return decorate if view is None else decorate(view)


def is_app_admin_view(request: HttpRequest) -> bool:
    """Whether the request's route is a page of one of the app's ModelAdmins: the admin
    site's views carry their ModelAdmin as .model_admin, a ModelAdmin's own extra views
    (admin_site.admin_view(self.some_view)) as the bound method they wrap."""
    func = getattr(getattr(request, "resolver_match", None), "func", None)
    owner = getattr(func, "model_admin", None) or getattr(getattr(func, "__wrapped__", None), "__self__", None)
    opts = getattr(owner, "opts", None)
    return opts is not None and opts.app_label == "scheduler_app"


def record_server_error(sender, request=None, **kwargs) -> None:
    """got_request_exception receiver: the app's admin pages' exceptions logged under an id."""
    if request is not None and is_app_admin_view(request):
        log_server_error(request)


def server_error(request: HttpRequest) -> HttpResponse:
    """A handler500 for a project that wants the id on every 500 page: the error logged under
    an id if nothing logged it yet (Django calls handler500 while handling the exception), and
    the page showing it. Cronfleet's deployment uses it (project/urls.py)."""
    return page_answer(log_server_error(request))


got_request_exception.connect(record_server_error, dispatch_uid="cronfleet-web-server-error")
