"""What the scripts that time this checkout beside another one (`--root`) share: their
`--inner` measurement run in each checkout, in turns."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def in_turns(script: Path, trees: dict[str, Path], turns: int, argv: list[str]) -> dict[str, list[str]]:
    """Each tree's answers (the last line `script --inner *argv` prints), `turns` of them,
    each from a process of its own run with the tree as its working directory and import
    path. Each turn goes in the other order: the first process of a turn meets what the one
    before it left behind (its rows deleted, PostgreSQL's vacuum, a cold cache)."""
    seen: dict[str, list[str]] = {name: [] for name in trees}
    for turn in range(turns):
        for name, root in list(trees.items())[:: 1 if turn % 2 == 0 else -1]:
            out = subprocess.run(
                [sys.executable, str(script), "--inner", *argv],
                cwd=root,
                env={**os.environ, "PYTHONPATH": str(root)},
                capture_output=True,
                text=True,
                check=True,
            )
            seen[name].append(out.stdout.strip().splitlines()[-1])
    return seen
