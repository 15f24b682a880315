"""Command jobs' isolation, the part that needs nothing running: the docs' command example
keeps each path to a file name (the real worker's side is tests/system/targets/test_command_isolation.py).
"""

from __future__ import annotations

import json
import re
import sys

import pytest

from scheduler_app.targets.command import InvalidCommand, build_argv, validate_config
from tests.conftest import ROOT


def test_the_docs_command_example_keeps_each_path_to_a_file_name():
    targets = (ROOT / "docs" / "targets.md").read_text()
    example = re.search(r"export CRONFLEET_COMMANDS='(.*?)'\n", targets, re.S)
    assert example, "docs/targets.md's command example shows its allow-list entry"
    config = json.loads(example.group(1))
    config["report"]["executable"] = sys.executable  # the example's python3 need not be installed here
    assert validate_config(config) is None
    params = {"day": "2024-01-01", "paths": ["a.csv", "b.csv"]}
    assert build_argv("report", params, config) == ["-m", "reports.run", "--day", "2024-01-01", "--", "a.csv", "b.csv"]

    for path in ("/proc/1/environ", "../../etc/passwd", "a.csv/../../x"):
        with pytest.raises(InvalidCommand) as refused:
            build_argv("report", {**params, "paths": [path]}, config)
        assert refused.value.field == "params.paths[0]", str(refused.value)
