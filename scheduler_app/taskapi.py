"""Django's task API, imported once: `django.tasks` (Django 6.0 and later), else the
`django-tasks` backport (Django 5.2; the `cronfleet[tasks]` extra); `api` is None with neither.

Also the two registries the task backend (scheduler_app/djangotasks/) fills as the host's
tasks modules are imported, read by the rooms below it:
- which tasks are bound to a Cronfleet backend, and for which tenant: a job may name a task
  (task_name "django:<module path>") only for the tenant its backend writes to;
- the periodic declarations (`@periodic`), which schedules as code reads as one group per
  module, owner "code:<module>".

No database, no Celery.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from django.utils.module_loading import autodiscover_modules


def _load() -> tuple[ModuleType | None, ModuleType | None, Any]:
    for name in ("django.tasks", "django_tasks"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        backends = importlib.import_module(f"{name}.backends.base")
        return module, importlib.import_module(f"{name}.exceptions"), backends.BaseTaskBackend
    return None, None, object


api, exceptions, BaseTaskBackend = _load()
# The names differ between the two: Django 6.0 dropped the backport's "Error" suffix.
InvalidTask: Any = getattr(exceptions, "InvalidTask", None) or getattr(exceptions, "InvalidTaskError", None)
ResultDoesNotExist: Any = getattr(exceptions, "TaskResultDoesNotExist", None)

PREFIX = "django:"  # a job's task_name for a django.tasks task: "django:billing.tasks.close_day"
OWNER_PREFIX = "code:"  # the owner of a module's periodic declarations in schedules as code
CALL_TAG = "django-tasks"  # every call's one-off job carries it: `jobs` commands and the API filter by it

_bound: dict[str, set[str]] = {}  # module path -> tenants of the Cronfleet backends it is bound to
_periodic: dict[str, dict[str, dict]] = {}  # module -> job name -> declared job table (with "tenant")
_modules: dict[str, set[str]] = {}  # module -> tenants it has bound tasks for (its owner's scope)


def require() -> ModuleType:
    """The task API module, or ImportError saying how to get one."""
    if api is None:
        raise ImportError(
            "Cronfleet's task backend needs Django's task API: Django 6.0 or later, "
            "or on Django 5.2 the backport (pip install 'cronfleet[tasks]')"
        )
    return api


def is_task_name(name: object) -> bool:
    return isinstance(name, str) and name.startswith(PREFIX)


def task_name(module_path: str) -> str:
    return PREFIX + module_path


def bind(module_path: str, module: str, tenant: str) -> None:
    """Record that the task at `module_path` (defined in `module`) runs on a Cronfleet backend
    writing to `tenant`; the backend calls this for every task it validates."""
    _bound.setdefault(module_path, set()).add(tenant)
    _modules.setdefault(module, set()).add(tenant)


def discover() -> None:
    """Import every installed app's tasks module (as Celery's worker does), so that their
    tasks and periodic declarations are registered."""
    autodiscover_modules("tasks")


def bound_tenants(module_path: str) -> set[str]:
    if module_path not in _bound:
        discover()
    return _bound.get(module_path, set())


def declare_periodic(module: str, tenant: str, table: dict) -> None:
    """Record one periodic declaration (a schedules-as-code job table with its name)."""
    _periodic.setdefault(module, {})[table["name"]] = {**table, "tenant": tenant}
    _modules.setdefault(module, set()).add(tenant)


def periodic_groups() -> list[tuple[str, dict]]:
    """(source, group) for each module with tasks bound to a Cronfleet backend: its periodic
    declarations under owner "code:<module>", one group per tenant. A module that declares no
    periodic task any more still names its owner and tenant, so plan prunes its jobs."""
    discover()
    groups = []
    for module in sorted(_modules):
        declared = _periodic.get(module, {})
        for tenant in sorted(_modules[module]):
            jobs = [
                {key: value for key, value in table.items() if key != "tenant"}
                for table in declared.values()
                if table["tenant"] == tenant
            ]
            group = {"owner": OWNER_PREFIX + module, "tenant": tenant}
            groups.append((f"{module} (periodic tasks)", {**group, "jobs": jobs} if jobs else group))
    return groups
