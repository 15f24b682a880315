"""The walk over every API route (tests/integration/api/test_api_isolation.py,
test_api_permissions.py, test_api_host_settings.py): every URL pattern registered under /api/v1/,
from the resolver, so a route added later is walked without anyone remembering to; each path
parameter filled with an object of tenant A's. A parameter the walk cannot fill fails the test,
naming the route: teach PARAMETERS about it.
"""

import re

from django.urls import URLPattern, URLResolver, get_resolver

API_PREFIX = "api/v1/"
METHODS = ("get", "head", "options", "post", "put", "patch", "delete")

# Which of A's objects fills a path parameter, by (first path segment, parameter name).
PARAMETERS = {
    ("jobs", "id"): lambda a: a["job"].id,
    ("runs", "id"): lambda a: a["run"].id,
    ("keys", "id"): lambda a: a["key"].id,
    ("tenants", "slug"): lambda a: a["tenant"].slug,
    ("calendars", "id"): lambda a: a["calendar"].id,
    ("windows", "id"): lambda a: a["window"].id,
    ("objectives", "id"): lambda a: a["objective"].id,
    ("pause-requests", "id"): lambda a: a["pause_request"].id,
}


def api_routes() -> list[tuple[str, object]]:
    """(path template under /api/v1/, view callback) for every registered API route."""
    found = []

    def walk(patterns, prefix: str) -> None:
        for pattern in patterns:
            text = prefix + str(pattern.pattern)
            if not (text.startswith(API_PREFIX) or API_PREFIX.startswith(text)):
                continue  # the admin and the rest of the site
            text = prefix + template_of(pattern.pattern)
            if isinstance(pattern, URLResolver):
                walk(pattern.url_patterns, text)
            elif isinstance(pattern, URLPattern) and text.startswith(API_PREFIX):
                found.append((text.removeprefix(API_PREFIX), pattern.callback))

    walk(get_resolver().url_patterns, "")
    return found


def template_of(pattern) -> str:
    """A route's text with its parameters as {name}; fails on what it cannot read."""
    text = str(pattern)
    text = re.sub(r"\(\?P<(\w+)>[^)]*\)", r"{\1}", text)  # regex groups
    text = re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", text)  # path() converters
    text = text.removeprefix("^").removesuffix("$").removesuffix(r"\Z")
    assert not re.search(r"[\\()\[\]?*+|^$]", text), f"the walk cannot read the route pattern {str(pattern)!r}"
    return text


def allowed_methods(callback) -> set[str]:
    if hasattr(callback, "actions"):  # a viewset route
        methods = set(callback.actions)
    else:
        view = callback.view_class
        methods = {method for method in view.http_method_names if method != "options" and hasattr(view, method)}
    return methods | {"head"} if "get" in methods else methods  # Django answers HEAD with GET


def fill(template: str, a: dict) -> str:
    segment = template.split("/")[0]

    def value(match) -> str:
        name = match.group(1)
        assert (segment, name) in PARAMETERS, (
            f"route {API_PREFIX}{template}: the isolation walk does not know how to fill {{{name}}}; "
            f"add ({segment!r}, {name!r}) to PARAMETERS in tests/support/api_walk.py"
        )
        return str(PARAMETERS[(segment, name)](a))

    return re.sub(r"\{(\w+)\}", value, template)
