"""`cuvil.atomic`: a file written from chunks holds them one after another, and a failed
write leaves the old file and no temporary behind; a written file has the mode the umask
gives, as `open()` would."""

import os
import stat

import numpy as np
import pytest

from cuvil.atomic import write_chunks, write_text


def _chunks():
    weights = np.arange(12, dtype=np.float32).reshape(3, 4)
    return [b"head\n", memoryview(weights.reshape(-1).view(np.uint8)), b"", bytes(range(7))]


def test_a_file_from_chunks_holds_their_bytes(tmp_path):
    path = tmp_path / "sub" / "entry.bin"
    write_chunks(path, _chunks())
    assert path.read_bytes() == b"".join(bytes(c) for c in _chunks())


def test_a_failed_write_keeps_the_old_file(tmp_path):
    path = tmp_path / "entry.bin"
    path.write_bytes(b"old")
    with pytest.raises(TypeError):
        write_chunks(path, [b"new", "not bytes"])
    assert path.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["entry.bin"]


@pytest.mark.parametrize("mask", [0o022, 0o077])
def test_a_written_file_has_the_mode_the_umask_gives(tmp_path, mask):
    old = os.umask(mask)
    try:
        write_text(tmp_path / "report.txt", "hello")
        (tmp_path / "plain.txt").write_text("hello")
    finally:
        os.umask(old)
    mode = stat.S_IMODE((tmp_path / "report.txt").stat().st_mode)
    assert mode == 0o666 & ~mask == stat.S_IMODE((tmp_path / "plain.txt").stat().st_mode)
