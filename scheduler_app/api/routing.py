"""Which requests are the API's, told from the routes, not from a path prefix.

A host mounts the API under whatever prefix it picks (`/cron/api/v1/`), so "the path starts
with /api/" means nothing there. A request is the API's when its route leads to one of the
API's views (each carries API_VIEW, set by views.ApiViewMixin, the schema and docs views, and
handler.no_route), or, when no route takes it, when its path lies under a mount of the API's
URLconf (scheduler_app.api.urls), wherever the host included it. Only error answers ask this
(the 404 handler, ApiErrorMiddleware), so walking the routes again costs nothing in the
ordinary case.
"""

from __future__ import annotations

from django.urls import Resolver404, URLResolver, get_resolver, resolve

API_VIEW = "cronfleet_api"  # the attribute that marks a view (class or function) as the API's
API_URLCONF = "scheduler_app.api.urls"


def is_api_view(callback) -> bool:
    """Whether a resolved route's callback is one of the API's views (a DRF view's callback
    carries its class as .cls; a plain view, handler.no_route, carries the mark itself)."""
    return bool(getattr(callback, API_VIEW, False) or getattr(getattr(callback, "cls", None), API_VIEW, False))


def is_api(request) -> bool:
    """Whether the request went to, or would go to, the API."""
    urlconf = getattr(request, "urlconf", None)  # a middleware may set one per request
    match = getattr(request, "resolver_match", None)
    if match is None:  # answered before routing (a bad Host header) or no route took it
        try:
            match = resolve(request.path_info, urlconf)
        except Resolver404:
            match = None
    if match is not None and is_api_view(match.func):
        return True
    return under_api_urlconf(get_resolver(urlconf), request.path_info)


def under_api_urlconf(resolver: URLResolver, path: str) -> bool:
    """Whether `path` lies under an include() of the API's URLconf, matched prefix by prefix
    as Django resolves it (so a prefix the host wrote as a regex or a converter counts too)."""
    matched = resolver.pattern.match(path)
    if matched is None:
        return False
    if getattr(resolver.urlconf_module, "__name__", None) == API_URLCONF:
        return True
    rest = matched[0]
    return any(
        under_api_urlconf(pattern, rest) for pattern in resolver.url_patterns if isinstance(pattern, URLResolver)
    )
