"""The tables the management commands print (scheduler_app/management/tables.py): columns
aligned, cells cleaned and cut to one line. The commands themselves are tested against the
real PostgreSQL in tests/integration/management/test_commands.py."""

from __future__ import annotations

from scheduler_app.management.tables import format_table, shorten

# --- format_table ---------------------------------------------------------------------


def test_format_table_aligns_columns_and_cleans_cells():
    text = format_table(["id", "name", "when"], [(1, "a\nb", None), (22, "long name", "")])

    assert text.splitlines() == [
        "id  name       when",
        "--  ---------  ----",
        "1   a b        -",
        "22  long name  -",
    ]


def test_shorten_keeps_one_line_and_marks_the_cut():
    assert shorten("line one\nline two\x1b[31m", 12) == "line one li…"
    assert shorten("short", 12) == "short"
