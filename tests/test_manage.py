"""`./manage.py` as the README writes it: run by a Python without Django, it runs again with
the checkout's virtual environment."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# The interpreter the virtual environment was made from: it has no Django of its own (and
# with -S, no site-packages at all).
BASE_PYTHON = Path(sys.base_prefix) / "bin" / "python3"
pytestmark = pytest.mark.skipif(not BASE_PYTHON.exists(), reason="no base interpreter beside the venv")


def test_manage_py_runs_again_with_the_venv_python_when_django_is_missing(tmp_path):
    shutil.copy(ROOT / "manage.py", tmp_path / "manage.py")
    fake = tmp_path / ".venv" / "bin" / "python"
    fake.parent.mkdir(parents=True)
    fake.write_text('#!/bin/sh\necho "venv python: $*"\n')
    fake.chmod(0o755)

    done = subprocess.run([BASE_PYTHON, "-S", tmp_path / "manage.py", "jobs", "list", "--limit", "5"],
                          capture_output=True, text=True, timeout=30)

    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == f"venv python: {tmp_path / 'manage.py'} jobs list --limit 5\n"


def test_manage_py_without_django_or_venv_says_how_to_make_one(tmp_path):
    shutil.copy(ROOT / "manage.py", tmp_path / "manage.py")

    done = subprocess.run([BASE_PYTHON, "-S", tmp_path / "manage.py", "check"], capture_output=True, text=True,
                          timeout=30)

    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("manage.py: No module named 'django' (using ")
    assert "./demo.sh" in done.stderr and "python3 -m venv .venv" in done.stderr


def test_dot_slash_manage_py_works_from_a_shell_whose_python3_has_no_django():
    venv_bin = str(ROOT / ".venv" / "bin")
    path = os.pathsep.join([str(BASE_PYTHON.parent), *(p for p in os.environ["PATH"].split(os.pathsep)
                                                      if p != venv_bin)])
    env = {**os.environ, "PATH": path, "DJANGO_SETTINGS_MODULE": "project.settings"}
    env.pop("VIRTUAL_ENV", None)

    done = subprocess.run(["./manage.py", "help", "jobs"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=60)

    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: manage.py jobs ")


def test_the_readme_runs_commands_as_dot_slash_manage_py():
    readme = (ROOT / "README.md").read_text().replace("`.venv/bin/python manage.py …`", "")  # the alternative

    assert "python manage.py" not in readme
    assert readme.count("./manage.py jobs ") >= 10
