"""What Cronfleet's hints tell a person to run or set, in the words of the project it is installed
in: its Celery app (`celery -A <the app's module> worker`) and its Django settings. Cronfleet's
own deployment is one such project: its app is project.celery's (named "cronfleet", loaded as
`-A project`), and its settings read environment variables of the same names.

Imported by commands and services only when they say something: nothing here runs at import.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable
from datetime import datetime

UNKNOWN_APP = "<your Celery app>"
# What `-A` and an app's main name look like when they can be shown as they are.
MODULE_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z")


def _app():
    from celery import current_app  # here: the host's Celery app is made after its settings load

    return current_app._get_current_object()


def celery_app_name() -> str:
    """The Celery app's own name (Celery(main)): 'cronfleet' in Cronfleet's deployment."""
    main = _app().main or ""
    return main if MODULE_PATH.match(main) and main != "__main__" else ""


def celery_app_argument() -> str:
    """What `celery -A` takes to load this process's Celery app.

    The app's name need not be its module's: Cronfleet's own is named "cronfleet" and loaded
    with `-A project`. Celery finds `-A proj` at proj.celery.app, the layout of Celery's "First
    steps with Django", so a module named *.celery that holds this very app names the package;
    else the app's name (the usual `Celery("proj")`), else UNKNOWN_APP. Module dictionaries
    are read directly: no module's lazy attribute is triggered."""
    app = _app()
    for name, module in list(sys.modules.items()):
        if name.endswith(".celery") and getattr(module, "__dict__", {}).get("app") is app:
            return name.removesuffix(".celery")
    return celery_app_name() or UNKNOWN_APP


def worker_command(queues: Iterable[str]) -> str:
    """`celery -A <app> worker -Q <default>,<queues>`: -Q replaces the worker's queues, so the
    app's own default queue stays listed (a host's worker keeps running the host's tasks)."""
    default = _app().conf.task_default_queue or "celery"
    listed = list(dict.fromkeys([default, *queues]))
    return f"celery -A {celery_app_argument()} worker -Q {','.join(listed)}"


def worker_hint(queues: Iterable[str]) -> str:
    """'start a worker of your Celery app (cronfleet) that consumes queue 'x' (celery -A ...)'. The
    app's name unquoted: quotes are the queues' (a queue may have the app's name)."""
    queues = list(queues)
    name = celery_app_name()
    which = f"queue {queues[0]!r}" if len(queues) == 1 else "queues " + ", ".join(map(repr, queues))
    return (
        f"start a worker of your Celery app{f' ({name})' if name else ''} that consumes {which} "
        f"({worker_command(queues)})"
    )


def setting_hint(name: str) -> str:
    """Where a Cronfleet setting is set: the host's settings module, or the variable of the same
    name in Cronfleet's own deployment (project/settings.py reads the environment)."""
    return f"{name} in your Django settings (the {name} environment variable in Cronfleet's own deployment)"


def unconsumed_warning(queue: str, now: datetime) -> str:
    """A warning for `manage.py jobs add` and `import_beat`: empty when a live worker consumes
    the job queue `queue` ('' is the default queue), else what to start."""
    from scheduler_app.models import NodeKind  # here: this module loads before Django's apps
    from scheduler_app.observability.nodes import node_states, queue_consumers  # here: as above
    from scheduler_app.queues import queue_name  # here: as above

    name = queue_name(queue)
    if queue_consumers(node_states(now, kind=NodeKind.WORKER)).get(name):
        return ""
    return (
        f"warning: no live worker consumes queue {name!r}: its runs wait in the broker, are not "
        f"published again, and are skipped (no_consumer) after CRONFLEET_UNCONSUMED_EXPIRE_SECONDS; "
        f"{worker_hint([name])}"
    )
