"""One shape for every API error: {"errors": [{"field": "schedule.cron", "message": "..."}]}.

Field names are dotted paths into the request body ("schedule.every", "tags.0"), a query
parameter ("cursor"), a header ("Authorization", "X-Cronfleet-Tenant"), "path" or "method",
"permission" for a staff session lacking a Django permission (permissions.py; the message
names it), or "body" for a problem with the body as a whole. services.InvalidInput is a 400 naming its
field (QuotaExceeded a 403); views whose representation nests service fields translate the
service's names (view.api_field).
"""

from __future__ import annotations

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import Http404, JsonResponse
from django.urls import Resolver404, resolve
from django.views.decorators.csrf import csrf_exempt
from django.views.defaults import page_not_found
from rest_framework import exceptions, status
from rest_framework.settings import api_settings
from rest_framework.views import exception_handler

from scheduler_app import services
from scheduler_app.api.errors import ApiError
from scheduler_app.api.routing import API_VIEW, is_api

# The field an exception without one is about.
DEFAULT_FIELDS = {
    exceptions.NotAuthenticated: "Authorization",
    exceptions.AuthenticationFailed: "Authorization",
    exceptions.PermissionDenied: "Authorization",
    exceptions.Throttled: "rate_limit",
    exceptions.MethodNotAllowed: "method",
    exceptions.UnsupportedMediaType: "Content-Type",
    exceptions.NotAcceptable: "Accept",
    exceptions.ParseError: "body",
}


def handle_exception(exc, context):
    """DRF's handler (status, WWW-Authenticate, Retry-After), with our body."""
    view = context.get("view")
    if isinstance(exc, Http404):  # get_object(): no such object in the caller's tenant
        exc = exceptions.NotFound("not found")
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    elif isinstance(exc, services.InvalidInput):
        code = status.HTTP_403_FORBIDDEN if isinstance(exc, services.QuotaExceeded) else status.HTTP_400_BAD_REQUEST
        exc = ApiError(getattr(view, "api_field", str)(exc.field), exc.message, code)
    response = exception_handler(exc, context)
    if response is None:
        return None  # not an API error: a bug, left to Django's 500 handling and logging
    if isinstance(exc, exceptions.ValidationError):
        errors = list(flatten(exc.detail))
    else:
        errors = [(error_field(exc, view), str(exc.detail))]
    response.data = {"errors": [{"field": field, "message": message} for field, message in errors]}
    return response


def error_field(exc, view) -> str:
    if getattr(exc, "field", None):
        return exc.field
    if isinstance(exc, exceptions.NotFound):
        return getattr(view, "lookup_url_kwarg", None) or getattr(view, "lookup_field", None) or "path"
    for kind, field in DEFAULT_FIELDS.items():
        if isinstance(exc, kind):
            return field
    return "body"


def flatten(detail, path: tuple[str, ...] = ()):
    """(dotted field, message) pairs from DRF's nested error details."""
    if isinstance(detail, dict):
        for key, value in detail.items():
            step = () if key == api_settings.NON_FIELD_ERRORS_KEY else (str(key),)
            yield from flatten(value, path + step)
    elif isinstance(detail, list):
        for index, item in enumerate(detail):
            # A list of messages is about `path`; a list of dicts (many=True) is per item.
            yield from flatten(item, path + ((str(index),) if isinstance(item, (dict, list)) else ()))
    else:
        yield ".".join(path) or "body", str(detail)


def not_found(request, exception):
    """A Django 404 handler (project/urls.py's handler404): the API's paths answer JSON in
    the API's shape, wherever the API is mounted (routing.is_api); others get Django's page."""
    if is_api(request):
        return no_route(request)
    return page_not_found(request, exception)


@csrf_exempt  # nothing is done here; a POST must get this 404, not a CSRF page
def no_route(request, *args, **kwargs):
    """Every path under the API's mount that no route takes (the URLconf that mounts the API
    maps it last, as `re_path(r"^api/", no_route)` beside `api/v1/`): a JSON 404 whatever
    DEBUG says (Django's debug 404 lists the URL patterns), and never APPEND_SLASH's redirect,
    which cannot carry a POST (Django answers 500 to that under DEBUG). A path that differs
    from a route by its trailing slash says which one it meant. The path is the full one, the
    host's prefix included: what the caller sent."""
    path = request.path_info
    message = f"no route {path!r}"
    other = path[:-1] if path.endswith("/") else f"{path}/"
    try:
        if resolve(other, getattr(request, "urlconf", None)).func is not no_route:
            message += f"; the route is {other!r}"
    except Resolver404:
        pass
    return JsonResponse({"errors": [{"field": "path", "message": message}]}, status=404)


# The resolved route marks the request as the API's (routing.py), under any prefix.
setattr(no_route, API_VIEW, True)
