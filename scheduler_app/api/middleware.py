"""Every error the API answers is JSON in the API's shape, whatever DJANGO_DEBUG says.

DRF's handler (handler.py, which every API view names itself) shapes the errors the API
raises on purpose. This covers the rest: an exception no view caught (JSON 500 whose id is
logged with the traceback, never the traceback itself) and any answer Django or a middleware
made as an HTML page (a 400 for a bad Host header, a debug 404). Which requests are the API's
is told from their route (routing.is_api), so this works under whatever prefix a host mounts
the API; the host's own pages are left alone (the admin keeps its pages).

Cronfleet's own deployment installs it (project/settings.py). A host project that does not
still gets JSON for everything an API view answers (authentication, permissions, validation,
404 of an object, 405, 413, 415, 429: the views' own exception handler) and for unknown paths
under the API (handler.no_route, mapped last by the URLconf that mounts the API). What it
loses without it:

- an uncaught exception (a bug, the database gone) answers the host's 500 page, HTML, or
  under DEBUG Django's technical page with the traceback and settings, instead of a JSON 500
  with an id (Django still logs the traceback under "django.request");
- an answer made before any API view runs, by Django or the host's middleware (400 for a
  Host header not in ALLOWED_HOSTS, a host middleware's redirect or refusal), stays as it was
  made, HTML included.

Adding "scheduler_app.api.middleware.ApiErrorMiddleware" to the host's MIDDLEWARE (first, to
see the answers of every middleware after it) restores both; it changes nothing outside the API.
"""

from __future__ import annotations

import logging
import uuid
from http import HTTPStatus

from django.core.signals import got_request_exception
from django.http import JsonResponse

from scheduler_app.api.routing import is_api

logger = logging.getLogger("scheduler_app.api")

ERROR_ID_HEADER = "X-Cronfleet-Error-Id"
# The field an error without one is about (handler.py's vocabulary).
STATUS_FIELDS = {404: "path", 405: "method", 413: "body", 415: "Content-Type"}


def record_server_error(sender, request=None, **kwargs) -> None:
    """Log an API request's uncaught exception under a new id (Django sends this signal while
    the exception is being handled, so the traceback is at hand)."""
    if request is None or not is_api(request):
        return
    request.cronfleet_error_id = uuid.uuid4().hex[:16]
    logger.error("server error %s: %s %s", request.cronfleet_error_id, request.method, request.path_info, exc_info=True)


got_request_exception.connect(record_server_error, dispatch_uid="cronfleet-api-server-error")


def error_response(status: int, field: str, message: str) -> JsonResponse:
    return JsonResponse({"errors": [{"field": field, "message": message}]}, status=status)


class ApiErrorMiddleware:
    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if response.status_code < 400 or not is_api(request):
            return response
        if response.status_code >= 500:
            return self.server_error(request, response)
        if response.get("Content-Type", "").startswith("application/json"):
            return response
        status = response.status_code
        return error_response(status, STATUS_FIELDS.get(status, "request"), HTTPStatus(status).phrase.lower())

    def server_error(self, request, response):
        error_id = getattr(request, "cronfleet_error_id", None)
        if error_id is None:
            if response.get("Content-Type", "").startswith("application/json"):
                return response  # a view's own JSON 5xx (none today): it already says what happened
            error_id = uuid.uuid4().hex[:16]
            logger.error(
                "server error %s: %s %s answered %s", error_id, request.method, request.path_info, response.status_code
            )
        answer = error_response(response.status_code, "server", f"internal error; it is logged as {error_id}")
        answer[ERROR_ID_HEADER] = error_id
        return answer
