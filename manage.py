#!/usr/bin/env python3
"""Django's command-line utility for Cronfleet.

Run as `./manage.py ...` from any Python 3: when Django is not importable here and the
checkout's virtual environment (.venv, made by ./demo.sh or ./test.sh) exists, the command
runs again with the environment's interpreter, so the commands in the README work as written.

`./manage.py bench ...` runs on bench.settings: the settings in effect otherwise (project.settings
by default) with the benchmarks' app installed; the product's settings never install it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"


def venv_python() -> Path | None:
    """The virtual environment's interpreter, unless it is the one running now (or missing)."""
    if Path(sys.prefix).resolve() == VENV.resolve():
        return None
    for candidate in (VENV / "bin" / "python", VENV / "Scripts" / "python.exe"):
        if candidate.exists():
            return candidate
    return None


def use_bench_settings() -> None:
    """For `bench` (and `help bench`): bench.settings, on the settings module otherwise in effect."""
    if not (ROOT / "bench" / "settings.py").exists():
        sys.exit(
            "manage.py: the benchmarks (bench/) are not installed in this image; run them from a "
            "checkout of the repository"
        )
    base = os.environ.get("DJANGO_SETTINGS_MODULE", "project.settings")
    if base != "bench.settings":  # not already switched (before the venv re-exec, say)
        os.environ["CRONFLEET_BENCH_BASE_SETTINGS"] = base
        os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"


def main() -> None:
    if sys.argv[1:2] == ["bench"] or sys.argv[1:3] == ["help", "bench"]:
        use_bench_settings()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    try:
        from django.core.management import execute_from_command_line
    except ImportError as exc:
        python = venv_python()
        if python is not None:
            os.execv(python, [str(python), str(Path(__file__).resolve()), *sys.argv[1:]])
        sys.exit(
            f"manage.py: {exc} (using {sys.executable}). Create the virtual environment with ./demo.sh, "
            f"or: python3 -m venv .venv && .venv/bin/pip install -r requirements.txt"
        )

    try:
        execute_from_command_line(sys.argv)
    except BrokenPipeError:
        exit_on_broken_pipe()
    except Exception as exc:  # noqa: BLE001 - only the two kinds below are turned into one line
        message, status = startup_error(exc)
        if message is None:
            raise
        print(f"manage.py: {message}", file=sys.stderr)
        sys.exit(status)
    try:
        sys.stdout.flush()  # a reader gone (| head -1) is noticed here, not at interpreter exit
    except BrokenPipeError:
        exit_on_broken_pipe()


def exit_on_broken_pipe() -> None:
    """The reader of our output went away (`... | head -1`): stop quietly, as `cat` does.
    Python flushes stdout again at exit, so it is pointed at /dev/null first."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    sys.exit(1)


def one_line(text: str) -> str:
    return " ".join(str(text).split())


def startup_error(exc: BaseException) -> tuple[str | None, int]:
    """A settings error (ImproperlyConfigured: status 2) or a database that cannot be reached
    (status 1), as one line naming what to set; (None, 0) for anything else, which is a bug to
    show with its traceback."""
    from django.core.exceptions import ImproperlyConfigured
    from django.db.utils import OperationalError

    if isinstance(exc, ImproperlyConfigured):
        return one_line(exc), 2
    try:
        from scheduler_app.management.tables import NO_TABLES, missing_tables
    except ImportError:  # the benchmarks' settings without the app, say
        pass
    else:
        if missing_tables(exc):
            return NO_TABLES, 1
    if isinstance(exc, OperationalError) and not database_connected():
        return f"cannot reach the database at DATABASE_URL ({database_address()}): {one_line(exc)}", 1
    return None, 0


def database_connected() -> bool:
    """Whether the default database connection was ever opened in this process: an
    OperationalError without one is the server or the database missing, not a query's."""
    try:
        from django.db import connection

        return connection.connection is not None
    except Exception:  # noqa: BLE001 - the settings themselves may be what failed
        return False


def database_address() -> str:
    """DATABASE_URL's engine, host, port and name, never its password."""
    try:
        from django.conf import settings

        db = settings.DATABASES["default"]
        engine = db["ENGINE"].rsplit(".", 1)[-1]
        if engine == "sqlite3":
            return f"sqlite {db['NAME']}"
        return f"{engine} {db.get('HOST') or 'localhost'}:{db.get('PORT') or 'default port'}/{db.get('NAME')}"
    except Exception:  # noqa: BLE001
        return "unknown"


if __name__ == "__main__":
    main()
