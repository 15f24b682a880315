"""Building Cronfleet from a copy of the checkout (test_package, test_adoption)."""

import shutil

# What a build must not see of the checkout: environments, data, other builds' leftovers.
NOT_SOURCES = shutil.ignore_patterns(
    ".git",
    ".venv",
    ".venv-*",
    "var",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    "*.pyc",
    ".pytest_cache",
    ".hypothesis",
)
