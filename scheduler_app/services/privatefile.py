"""Files that hold secrets (a tenant's export document, the proxy's maps of moved keys),
written readable by their owner only from their first byte, whatever the process umask, and
replacing an older file in one rename, so no reader ever sees a part, nor the text at a
wider mode."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

PRIVATE = 0o600


def write_private(path: Path, text: str | Callable[[TextIO], object]) -> None:
    """Replace `path` with `text` (or what `text(out)` writes to the file, for a document too
    large to hold whole), owner-only (0600), whole or not at all."""
    # mkstemp creates the file 0600 with O_EXCL, never through the umask; the fchmod only
    # says so where a reader of this code would look for the mode.
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(handle, PRIVATE)
        with os.fdopen(handle, "w") as out:
            if isinstance(text, str):
                out.write(text)
            else:
                text(out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
