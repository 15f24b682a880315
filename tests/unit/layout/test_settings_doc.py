"""docs/settings.md stays complete: every Cronfleet setting has a row with its default, and the
page names no setting that does not exist. No database: it reads scheduler_app/conf.py's
DEFAULTS and the page."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from scheduler_app.conf import DEFAULTS, PREFIX, Derived

ROOT = Path(__file__).resolve().parents[3]
PAGE = ROOT / "docs" / "settings.md"
HEADER = "| setting | default | what it does | who needs it |"
# CRONFLEET_* names the page documents that are not app settings: environment variables of
# Cronfleet's own deployment (project/settings.py, gunicorn, compose), or read from the
# environment by its processes, and the one Django setting the deployment derives.
DEPLOYMENT_ONLY = {
    "CRONFLEET_DEFAULT_QUEUE",
    "CRONFLEET_FAILPOINTS",
    "CRONFLEET_HOST",
    "CRONFLEET_LOG_FORMAT",
    "CRONFLEET_LOG_LEVEL",
    "CRONFLEET_SQL_DATABASES",
    "CRONFLEET_SQL_DATABASE_ALIASES",
    "CRONFLEET_VAR_DIR",
    "CRONFLEET_VERSION",
    "CRONFLEET_WEB_BIND",
    "CRONFLEET_WEB_PUBLISH",
    "CRONFLEET_WEB_THREADS",
    "CRONFLEET_WEB_WORKERS",
}
# A default that is neither a literal nor Derived: a path under the machine's temporary directory.
NOT_LITERAL = {"COMMAND_CWD"}
NAME = re.compile(r"\bCRONFLEET_[A-Z0-9_]*[A-Z0-9]\b")


def page() -> str:
    return PAGE.read_text(encoding="utf-8")


def cells(line: str) -> list[str]:
    """The cells of a table row; a `|` inside backticks stays in its cell."""
    parts, current, in_code = [], "", False
    for char in line.strip().strip("|"):
        if char == "`":
            in_code = not in_code
        if char == "|" and not in_code:
            parts.append(current.strip())
            current = ""
        else:
            current += char
    return [*parts, current.strip()]


def rows() -> dict[str, list[str]]:
    """Short setting name -> the cells of its row, from the tables of settings."""
    found: dict[str, list[str]] = {}
    in_table = False
    for line in page().splitlines():
        if line.strip() == HEADER:
            in_table = True
            continue
        if not line.startswith("|"):
            in_table = False
            continue
        if not in_table or set(line) <= set("|- "):
            continue
        row = cells(line)
        assert len(row) == 4, f"a settings row has 4 cells: {line}"
        match = re.fullmatch(r"`CRONFLEET_([A-Z0-9_]+)`", row[0])
        assert match, f"a settings row starts with one `CRONFLEET_...` name: {line}"
        assert match[1] not in found, f"{row[0]} has two rows"
        assert all(row), f"every cell of a settings row is filled: {line}"
        found[match[1]] = row
    return found


def first_literal(cell: str):
    """The Python value of the first backticked literal in a default cell."""
    match = re.search(r"`([^`]+)`", cell)
    assert match, f"no `literal` in {cell!r}"
    return ast.literal_eval(match[1])


def test_every_setting_has_a_row_and_every_row_is_a_setting():
    documented = rows()
    assert sorted(set(DEFAULTS) - set(documented)) == []
    assert sorted(set(documented) - set(DEFAULTS)) == []


def test_the_rows_follow_conf_py_order():
    """One table per group of conf.py, in its order: the page reads as the code is laid out."""
    assert list(rows()) == list(DEFAULTS)


def test_every_name_the_page_mentions_exists():
    """A typo, or a setting since removed, fails here."""
    mentioned = set(NAME.findall(page()))
    settings = {PREFIX + name for name in DEFAULTS}
    assert sorted(mentioned - settings - DEPLOYMENT_ONLY) == []


def test_the_deployment_only_names_are_documented_and_read_somewhere():
    text = page()
    assert sorted(name for name in DEPLOYMENT_ONLY if name not in text) == []
    assert sorted(name for name in DEPLOYMENT_ONLY if name.removeprefix(PREFIX) in DEFAULTS) == []
    sources = "\n".join(
        path.read_text(encoding="utf-8")
        for folder in ("project", "scheduler_app")
        for path in (ROOT / folder).rglob("*.py")
    )
    sources += (ROOT / "docker-compose.yml").read_text(encoding="utf-8")
    assert sorted(name for name in DEPLOYMENT_ONLY if name not in sources) == []


@pytest.mark.parametrize(
    "name", [name for name in DEFAULTS if not isinstance(DEFAULTS[name], Derived) and name not in NOT_LITERAL]
)
def test_a_default_in_the_table_is_the_default(name):
    default = DEFAULTS[name]
    value = first_literal(rows()[name][1])
    assert (type(value), value) == (type(default), default), f"{PREFIX}{name}: the page says {value!r}"


def test_a_computed_default_says_so():
    """A Derived default is written as what it is computed from, never as a fixed value."""
    for name, row in rows().items():
        computed = row[1].startswith("computed: ")
        assert computed == isinstance(DEFAULTS[name], Derived), f"{PREFIX}{name}: {row[1]!r}"


def test_the_command_directory_default_names_its_folder():
    assert Path(DEFAULTS["COMMAND_CWD"]).name in rows()["COMMAND_CWD"][1]
