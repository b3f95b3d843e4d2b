"""The one disk store behind every cache (`cuvil.disk_store`) with its entry format
(`cache/tensor_entry.py`, safetensors): what is read back is what was written, else a miss
with one warning; processes share it; a hit keeps an entry from eviction."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import warnings

import numpy as np
import pytest
import torch

from cuvil import disk_store
from cuvil.cache import tensor_entry
from cuvil.disk_store import Store

FORM = "cuvil-test 1"
STORE = Store("graphs", ".cvg")


def entry(seed: int) -> tuple[dict, dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return {"seed": seed}, {"w": torch.randn(16, 8, generator=g),
                            "b": torch.randn(8, generator=g).to(torch.bfloat16)}


def load(key: str, root):
    return STORE.load(key, lambda data: tensor_entry.unpack(FORM, data), root=root)


def test_an_entry_reads_back_as_written(tmp_path):
    header, tensors = entry(0)
    assert STORE.put("k", tensor_entry.pack(FORM, header, tensors), root=tmp_path)
    got_header, got = load("k", tmp_path)
    assert got_header == header and got.keys() == tensors.keys()
    for name, t in tensors.items():
        assert got[name].dtype == t.dtype and torch.equal(got[name], t)
    assert oct(STORE.path("k", tmp_path).stat().st_mode & 0o777) == \
        oct(0o666 & ~_umask())


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def damaged(data: bytes, how: str) -> bytes:
    if how == "truncated":
        return data[:-5]
    if how == "a tensor byte":
        return data[:-3] + bytes([data[-3] ^ 1]) + data[-2:]
    if how == "the header":
        return data.replace(b'seed', b'seeD', 1)
    return b""


@pytest.mark.parametrize("how", ["truncated", "a tensor byte", "the header", "empty"])
def test_a_damaged_entry_is_a_miss_with_one_warning(tmp_path, how):
    header, tensors = entry(1)
    data = tensor_entry.pack(FORM, header, tensors)
    STORE.path("k", tmp_path).parent.mkdir(parents=True)
    STORE.path("k", tmp_path).write_bytes(damaged(data, how))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert load("k", tmp_path) is None
    assert len(caught) == 1 and "graphs cache entry k is damaged" in str(caught[0].message)


def test_numpy_entries_keep_dtype_and_shape(tmp_path):
    arrays = {"a": np.arange(12, dtype=np.float32).reshape(3, 4), "s": np.full((), 2.5),
              "e": np.empty((0, 3), np.int8)}
    header, got = tensor_entry.unpack(FORM, tensor_entry.pack(FORM, {}, arrays), "np")
    for name, a in arrays.items():
        assert got[name].dtype == a.dtype and got[name].shape == a.shape
        np.testing.assert_array_equal(got[name], a)


WRITER = textwrap.dedent("""
    import sys, torch
    from cuvil.cache import tensor_entry
    from cuvil.disk_store import Store
    store, root, seed = Store("graphs", ".cvg"), sys.argv[1], int(sys.argv[2])
    for i in range(60):
        t = torch.full((4096,), float(seed * 1000 + i))
        store.put("shared", tensor_entry.pack("cuvil-test 1", {"i": i}, {"t": t}), root=root)
        header, tensors = tensor_entry.unpack("cuvil-test 1", store.path("shared", root)
                                              .read_bytes())
        assert tensors["t"].unique().numel() == 1
""")


def test_two_processes_share_one_store_and_never_read_half_an_entry(tmp_path):
    """Two processes write and read the same key at once: each read is a whole entry,
    and the last one written reads back here."""
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    procs = [subprocess.Popen([sys.executable, str(script), str(tmp_path), str(seed)])
             for seed in (1, 2)]
    assert [p.wait(timeout=300) for p in procs] == [0, 0]
    header, tensors = load("shared", tmp_path)
    value = tensors["t"][0].item()
    assert header["i"] == 59 and value in (1059.0, 2059.0)
    assert torch.equal(tensors["t"], torch.full((4096,), value))


def test_eviction_keeps_the_entry_used_last(tmp_path):
    for n, key in enumerate(("a", "b", "c")):
        STORE.put(key, tensor_entry.pack(FORM, *entry(n)), root=tmp_path)
        past = time.time() - 3600 + 60 * n
        os.utime(STORE.path(key, tmp_path), (past, past))
    assert load("a", tmp_path) is not None  # the oldest, now used
    size = STORE.path("a", tmp_path).stat().st_size
    removed = disk_store.keep_size(limit=size, root=tmp_path)
    assert sorted(u.files[0].name for u in removed) == ["b.cvg", "c.cvg"]
    assert load("a", tmp_path) is not None
