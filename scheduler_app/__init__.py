"""Cronfleet: a Django app that schedules and runs jobs through Celery."""

# The one place the version is written: pyproject.toml reads it (setuptools' dynamic
# version parses this assignment without importing the package, so without Django), and
# `manage.py cronfleet --version` and `manage.py status` show it. A plain literal, so that
# the parse keeps working.
__version__ = "0.9.0"
