"""What a staff session may do through the API: the Django permissions the admin checks.

A key is judged by what it is (auth.py): a staff key administers every tenant, a tenant key
acts for its own. A logged-in staff user is judged as the admin judges them. Each view names,
per action (a viewset's) or per HTTP method (another view's), what it needs in
`required_permissions`:

- reads need the model's view permission; writes its add, change or delete permission;
- operating a job (pause, resume, trigger, backfill, replay) needs change_job, as the
  admin's actions and console buttons do;
- two permissions of Cronfleet's own: apikey.mint_apikey (beside add_apikey) to make a key,
  tenant.change_tenant_quotas (beside change_tenant) to change a tenant's quotas, weight or
  retention.

A frozenset in a requirement means one of them is enough to get past the route: the view then
asks for the exact one once it knows what the body asks (bulk's pause or delete, an alert
rule made or changed). An action no view names refuses every session, so a new route is
closed until someone says what it needs. Superusers hold every permission (Django's has_perm).
docs/roles.md has the table.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.contrib.auth.models import AnonymousUser
from rest_framework import status

from scheduler_app.api.errors import ApiError
from scheduler_app.models import Alert, AlertRule, ApiKey, Job, JobRun, Tenant

FIELD = "permission"  # the error's field (handler.py's vocabulary)


def perm(model, action: str) -> str:
    """'scheduler_app.change_job': Django's name of a model permission."""
    return f"{model._meta.app_label}.{action}_{model._meta.model_name}"


VIEW_TENANT, ADD_TENANT, CHANGE_TENANT = (perm(Tenant, action) for action in ("view", "add", "change"))
CHANGE_TENANT_QUOTAS = f"{Tenant._meta.app_label}.change_tenant_quotas"
VIEW_APIKEY, ADD_APIKEY, CHANGE_APIKEY = (perm(ApiKey, action) for action in ("view", "add", "change"))
MINT_APIKEY = f"{ApiKey._meta.app_label}.mint_apikey"
VIEW_JOB, ADD_JOB, CHANGE_JOB, DELETE_JOB = (perm(Job, action) for action in ("view", "add", "change", "delete"))
VIEW_JOBRUN = perm(JobRun, "view")
VIEW_ALERTRULE, ADD_ALERTRULE, CHANGE_ALERTRULE, DELETE_ALERTRULE = (
    perm(AlertRule, action) for action in ("view", "add", "change", "delete")
)
VIEW_ALERT = perm(Alert, "view")

# Making a key, wherever it is made (the admin's add form asks the same).
MINT = (ADD_APIKEY, MINT_APIKEY)
# Operating a job: the admin's pause/resume/trigger actions, its console and run replay.
OPERATE_JOB = CHANGE_JOB


def session_user(request):
    """The staff user of a session, or None for a key (whose rights auth.py decides). Any
    other caller is judged as an anonymous user, who holds no permission."""
    if isinstance(request.auth, ApiKey):
        return None
    return request.user if request.user is not None else AnonymousUser()


def missing(user, needed: Iterable) -> list[str]:
    """What of `needed` the user lacks: each item a permission, or a frozenset of which one
    is enough (named as 'one of a, b')."""
    lacking = []
    for item in needed:
        if isinstance(item, frozenset):
            if not any(user.has_perm(name) for name in item):
                lacking.append("one of " + ", ".join(sorted(item)))
        elif not user.has_perm(item):
            lacking.append(item)
    return lacking


def require(request, *needed) -> None:
    """Refuse a staff session that lacks any of `needed` (403 naming what is missing);
    a key passes (auth.py has judged it)."""
    user = session_user(request)
    if user is None:
        return
    lacking = missing(user, needed)
    if lacking:
        raise ApiError(
            FIELD,
            f"staff user {user.get_username()!r} lacks the permission {', '.join(lacking)}",
            status.HTTP_403_FORBIDDEN,
        )


def route_requirements(view, request) -> tuple | None:
    """What the view says its action (or method) needs; None when it says nothing."""
    table = getattr(view, "required_permissions", None) or {}
    action = getattr(view, "action", None)
    if action is not None:
        return table.get(action)
    method = request.method.lower()
    return table.get(method, table.get("get") if method == "head" else None)


def check_route(request, view) -> None:
    """A staff session's pass through the route's door: 403 unless it holds what the route
    needs; a route that names nothing for this action refuses."""
    method = request.method.lower()
    if method == "options" or not hasattr(view, method):
        return  # nothing of the view runs: DRF answers 405 (no OPTIONS metadata either)
    needed = route_requirements(view, request)
    if needed is None:
        raise ApiError(
            FIELD,
            f"{type(view).__name__} names no permission for this action: no staff session may call it",
            status.HTTP_403_FORBIDDEN,
        )
    require(request, *needed)
