"""A cell's name (CRONFLEET_CELL, docs/scaling.md: Routing): its form, read where it is checked
(the settings), written into API keys and ping URLs, and read back from them (the key
pattern, the ping routes, deploy/nginx/cells.conf). No Django import: the settings use it."""

import re

CELL_NAME = r"[a-z][a-z0-9]{0,15}"


def check_cell(name: str) -> str | None:
    """What is wrong with `name` as a cell's name, or None."""
    if name and not re.fullmatch(CELL_NAME, name):
        return (
            f"must be a lowercase letter then up to 15 lowercase letters or digits (it is part of API keys "
            f"and ping URLs), got {name!r}"
        )
    return None
