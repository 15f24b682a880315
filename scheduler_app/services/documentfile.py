"""A tenant document read from its file (`tenants import`) without holding its runs: the
memory of an import is that of the document's head (the tenant, calendars, windows, jobs and
keys) and of one batch of runs, whatever the history `--with-runs` brought.

tenantmove.dump() writes the runs member last, one run a line after a line ` "runs": [`.
The head is parsed whole, and the runs are parsed a line at a time as the import creates
them (FileRuns). A file not in that layout (edited and formatted anew, say) is read whole,
up to MAX_WHOLE_BYTES. With CRONFLEET_TENANT_DOCUMENT_KEY set, the MAC is checked first, in
one pass over the file's bytes (documentmac.verify_file).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from scheduler_app.services import documentmac
from scheduler_app.validation import InvalidInput

RUNS_OPEN = b' "runs": [\n'  # the line dump() ends the head with
RUNS_CLOSE = b"]"
MAX_WHOLE_BYTES = 64 * 1024 * 1024


class FileRuns:
    """The runs of a document file, from `offset` (the line after RUNS_OPEN) to the line that
    closes the list, parsed one line at a time each time it is iterated."""

    def __init__(self, path: Path, offset: int) -> None:
        self.path, self.offset = path, offset

    def __iter__(self) -> Iterator[dict]:
        with self.path.open("rb") as lines:
            lines.seek(self.offset)
            for i, line in enumerate(lines):
                text = line.strip()
                if text.removesuffix(b",") == RUNS_CLOSE:  # "]," where the MAC follows
                    return
                try:
                    yield json.loads(text.removesuffix(b","))
                except ValueError as exc:
                    raise InvalidInput(f"runs[{i}]", f"not JSON: {exc}") from None
        raise InvalidInput("runs", "the list of runs is not closed: the file ends inside it")


def read_document(path: Path) -> dict:
    """The document in `path`, its runs a FileRuns where the file has dump()'s layout."""
    try:
        documentmac.verify_file(path)
        with path.open("rb") as lines:
            head = []
            while line := lines.readline():
                head.append(line)
                if line == RUNS_OPEN:
                    return {**parse(b"".join(head) + b"]}"), "runs": FileRuns(path, lines.tell())}
        if path.stat().st_size > MAX_WHOLE_BYTES:
            raise InvalidInput(
                "file",
                f"over {MAX_WHOLE_BYTES // (1024 * 1024)} MiB and not in the layout `tenants export` "
                "writes (its runs last, one a line): export it again",
            )
        return parse(path.read_bytes())
    except OSError as exc:
        raise InvalidInput("file", f"cannot read {path}: {exc}") from None


def parse(text: bytes) -> dict:
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise InvalidInput("file", f"not JSON: {exc}") from None
    if not isinstance(document, dict):
        raise InvalidInput("file", "not a tenant document (a JSON object expected)")
    return document
