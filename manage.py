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
        sys.exit("manage.py: the benchmarks (bench/) are not installed in this image; run them from a "
                 "checkout of the repository")
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
        sys.exit(f"manage.py: {exc} (using {sys.executable}). Create the virtual environment with ./demo.sh, "
                 f"or: python3 -m venv .venv && .venv/bin/pip install -r requirements.txt")

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
