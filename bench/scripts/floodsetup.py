"""What the two-tenant flood scripts (alert_flood.py, backfill_flood.py) share: the
--root and --database arguments, a fresh database of their own on DATABASE_URL's server,
Django set up from the tree under --root, and stopping the processes they start."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the checkout (this is bench/scripts/)


def add_arguments(parser: argparse.ArgumentParser, database: str) -> None:
    parser.add_argument("--root", default=str(ROOT), help="the code tree to run (default: this checkout)")
    parser.add_argument("--database", default=database)


def set_up(args, *, script: str, env: dict[str, str] | None = None) -> Path:
    """Point this process (and the children it starts) at a fresh database `args.database`
    and the tree under `args.root`, set Django up there and migrate; the tree's path."""
    root = Path(args.root).resolve()
    base = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/cronfleet").rsplit("/", 1)[0]
    os.environ["DATABASE_URL"] = f"{base}/{args.database}"
    os.environ.setdefault("CELERY_BROKER_URL", "redis://127.0.0.1:6379/12")
    os.environ.setdefault("DJANGO_SECRET_KEY", f"{script}-only-secret-key-not-used-anywhere")
    os.environ["DJANGO_SETTINGS_MODULE"] = "project.settings"
    os.environ.update(env or {})
    os.chdir(root)  # as well as sys.path: Celery puts the working directory first on it
    sys.path.insert(0, str(root))
    fresh_database(base, args.database)

    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    return root


def fresh_database(base: str, name: str) -> None:
    import psycopg

    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def start(root: Path, env: dict[str, str], logs: Path, processes: dict[str, list[str]]) -> list[subprocess.Popen]:
    """Start each of `processes` (name -> argv) in `root`, each leading a session of its own
    (stop() ends its whole group), its output in `logs`/<name>.log."""
    return [
        subprocess.Popen(
            argv,
            cwd=root,
            env=env,
            stdout=(logs / f"{name}.log").open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        for name, argv in processes.items()
    ]


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
