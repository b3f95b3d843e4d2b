"""Files written atomically: a reader sees the old file or the new one, never half of it.
A written file gets the mode `open()` would give it: 0666 less the process's umask."""

from __future__ import annotations

import os
import tempfile
import threading
from pathlib import Path

_UMASK_LOCK = threading.Lock()


def _umask() -> int:
    """The process's umask, read from /proc where it is shown, else set and restored
    under a lock (os.umask has no read-only form)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    with _UMASK_LOCK:
        mask = os.umask(0o077)
        os.umask(mask)
    return mask


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    write_chunks(path, [data])


def write_chunks(path: str | os.PathLike, chunks) -> None:
    """The file holding the chunks (bytes-like: bytes, memoryviews of arrays) one after
    another, written without joining them (a model's weights are hundreds of MB)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as f:
            f.writelines(chunks)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text(path: str | os.PathLike, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))
