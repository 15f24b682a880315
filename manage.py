#!/usr/bin/env python3
"""Django's command-line utility for Cronfleet.

Run as `./manage.py ...` from any Python 3: when Django is not importable here and the
checkout's virtual environment (.venv, made by ./demo.sh or ./test.sh) exists, the command
runs again with the environment's interpreter, so the commands in the README work as written.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

VENV = Path(__file__).resolve().parent / ".venv"


def venv_python() -> Path | None:
    """The virtual environment's interpreter, unless it is the one running now (or missing)."""
    if Path(sys.prefix).resolve() == VENV.resolve():
        return None
    for candidate in (VENV / "bin" / "python", VENV / "Scripts" / "python.exe"):
        if candidate.exists():
            return candidate
    return None


def main() -> None:
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
