"""Who is calling: an API key (`Authorization: Bearer cf_...`) or a logged-in staff session.

A key is taken from the Authorization header only: never from the query string (URLs end
up in logs) and never as Basic credentials. request.auth is the ApiKey; a key without a
tenant is a staff key. Sessions count only for active staff users, with DRF's CSRF check,
and do only what their Django permissions allow (permissions.py), as in the admin.

These two are the API's only ways in (views.ApiViewMixin names them, whatever the host's
REST_FRAMEWORK says). A caller is staff by a staff key, or by a session this module's
StaffSessionAuthentication accepted, never for want of a key: a request that reached a view
some other way (a host's SessionAuthentication or BasicAuthentication, a plain user, an
anonymous one) is nobody here.
"""

from __future__ import annotations

from django.conf import settings
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions, permissions

from scheduler_app import services
from scheduler_app.api import permissions as route_permissions
from scheduler_app.api import throttling
from scheduler_app.models import ApiKey

BEARER = "Bearer"


class KeyCaller:
    """request.user for a key: DRF wants a user object; the key itself is request.auth."""

    is_authenticated = True
    is_active = True

    def __init__(self, key: ApiKey) -> None:
        self.is_staff = key.is_staff
        self.username = f"key:{key.prefix}"

    def __str__(self) -> str:
        return self.username


class BearerKeyAuthentication(authentication.BaseAuthentication):
    def authenticate(self, request):
        header = request.headers.get("Authorization")
        if header is None:
            return None
        scheme, _, raw = header.strip().partition(" ")
        if scheme.lower() != BEARER.lower() or not raw.strip():
            raise exceptions.AuthenticationFailed(f"use {BEARER} <api key>")
        # An address that guessed wrong too often this minute is refused before the lookup;
        # a wrong guess costs one indexed lookup (the unique prefix) and counts against it.
        throttling.check_address(request)
        key = services.apikey_authenticate(raw.strip())
        if key is None:
            throttling.count_failure(request)
            raise exceptions.AuthenticationFailed("unknown or revoked API key (or its tenant is not active)")
        return KeyCaller(key), key

    def authenticate_header(self, request) -> str:
        # Makes DRF answer 401 (not 403) with this WWW-Authenticate header.
        return f'{BEARER} realm="cronfleet"'


class StaffSessionAuthentication(authentication.SessionAuthentication):
    """A logged-in Django staff user (the admin's session), CSRF-checked on writes."""

    def authenticate(self, request):
        user = getattr(request._request, "user", None)
        if user is None or not user.is_active or not user.is_staff:
            return None
        return super().authenticate(request)


def api_key(request) -> ApiKey | None:
    return request.auth if isinstance(request.auth, ApiKey) else None


def is_staff_session(request) -> bool:
    """An active staff user whose session StaffSessionAuthentication accepted (so the CSRF
    check ran); a user let in by any other authenticator is not one."""
    if api_key(request) is not None or not isinstance(request.successful_authenticator, StaffSessionAuthentication):
        return False
    user = request.user
    return bool(user is not None and user.is_authenticated and user.is_active and user.is_staff)


def is_staff_caller(request) -> bool:
    """A staff key, or a staff session (whose permissions each route checks besides)."""
    key = api_key(request)
    if key is not None:
        return key.is_staff
    return is_staff_session(request)


def actor(request) -> str:
    """The audit trail's name for the caller."""
    key = api_key(request)
    return f"api:{key.prefix}" if key is not None else f"api:staff:{request.user.get_username()}"


class IsApiCaller(permissions.BasePermission):
    """Any key (the views scope a tenant key to its tenant), or a staff session holding the
    Django permissions the route needs for this action (403 naming the one missing)."""

    def has_permission(self, request, view) -> bool:
        if api_key(request) is not None:
            return True
        if not is_staff_session(request):
            return False
        route_permissions.check_route(request, view)
        return True


class IsStaffCaller(IsApiCaller):
    """A staff key, or a staff session with the route's permissions; never a tenant key."""

    message = "needs a staff key or a staff session"

    def has_permission(self, request, view) -> bool:
        key = api_key(request)
        if key is not None:
            return key.is_staff
        return super().has_permission(request, view)


class BearerKeyScheme(OpenApiAuthenticationExtension):
    target_class = BearerKeyAuthentication
    name = "bearerAuth"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "bearerFormat": "cf_[<cell>_]<prefix>_<secret>"}


class StaffSessionScheme(OpenApiAuthenticationExtension):
    target_class = StaffSessionAuthentication
    name = "cookieAuth"

    def get_security_definition(self, auto_schema):
        return {"type": "apiKey", "in": "cookie", "name": settings.SESSION_COOKIE_NAME}
