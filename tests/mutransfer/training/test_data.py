from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from mutransfer.training.corpus import build_stdlib_corpus, cache_dir, stdlib_files
from mutransfer.training.data import DataConfig, TokenDataset, load_dataset


@pytest.fixture
def small_stdlib(tmp_path: Path) -> TokenDataset:
    return load_dataset(DataConfig(max_bytes=50_000, val_fraction=0.1, cache_dir=str(tmp_path)))


def _arange_dataset(n: int = 10_000) -> TokenDataset:
    # Token i at position i makes every window identify its own offset.
    arr = np.arange(n, dtype=np.uint32)
    return TokenDataset({"train": arr, "val": arr[:500]}, vocab_size=n)


# ---- stdlib corpus -------------------------------------------------------------------


def test_stdlib_corpus_is_real_python_source_split_by_file(tmp_path: Path) -> None:
    ds = load_dataset(DataConfig(max_bytes=50_000, val_fraction=0.1, cache_dir=str(tmp_path)))
    assert ds.vocab_size == 256
    assert ds.n_tokens("train") + ds.n_tokens("val") == 50_000
    assert ds.n_tokens("val") == 5_000
    text = bytes(ds.tokens("train")[:2000]).decode("utf-8")
    assert "def " in text or "import " in text
    meta = ds.meta
    assert meta["python"].endswith(".".join(map(str, sys.version_info[:3])))
    assert meta["n_tokens"] == {"train": 45_000, "val": 5_000}
    assert "by file" in meta["split_rule"]
    # The split is by file: no file is in both splits.
    root, rel = stdlib_files()
    assert len(rel) > 100 and rel == sorted(rel)
    assert not any("site-packages" in p or "/test/" in f"/{p}" for p in rel)


def test_stdlib_cache_is_reused_and_key_depends_on_settings(tmp_path: Path) -> None:
    a = build_stdlib_corpus(tmp_path, val_fraction=0.1, max_bytes=20_000)
    mtime = (a / "train.bin").stat().st_mtime_ns
    again = build_stdlib_corpus(tmp_path, val_fraction=0.1, max_bytes=20_000)
    assert again == a and (a / "train.bin").stat().st_mtime_ns == mtime  # not rebuilt
    b = build_stdlib_corpus(tmp_path, val_fraction=0.2, max_bytes=20_000)
    assert b != a
    meta = json.loads((a / "meta.json").read_text())
    assert meta["n_tokens"]["train"] == (a / "train.bin").stat().st_size
    # No temp files left behind.
    assert not [p for p in a.iterdir() if p.name.startswith(".")]


def test_stdlib_cache_rebuilds_a_truncated_build(tmp_path: Path) -> None:
    a = build_stdlib_corpus(tmp_path, val_fraction=0.1, max_bytes=20_000)
    good = (a / "train.bin").read_bytes()
    (a / "train.bin").write_bytes(good[:100])  # simulate a damaged cache
    assert build_stdlib_corpus(tmp_path, val_fraction=0.1, max_bytes=20_000) == a
    assert (a / "train.bin").read_bytes() == good


def test_cache_dir_honours_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MUTRANSFER_CACHE", str(tmp_path / "c"))
    assert cache_dir() == tmp_path / "c"
    assert cache_dir(tmp_path / "x") == tmp_path / "x"
    monkeypatch.delenv("MUTRANSFER_CACHE")
    assert cache_dir() == Path.home() / ".cache" / "mutransfer"


def test_val_split_of_full_stdlib_is_by_file_and_stable() -> None:
    from mutransfer.training.corpus import _split_by_file

    _, rel = stdlib_files()
    files = _split_by_file(rel, 0.02)
    assert set(files["train"]).isdisjoint(files["val"])
    assert set(files["train"]) | set(files["val"]) == set(rel)
    # Membership depends on the file's own path only: dropping other files keeps it.
    from mutransfer.training.corpus import _hash_unit

    sub = _split_by_file(rel[::2], 0.02)
    hashed_val = {p for p in rel[::2] if _hash_unit(p) < 0.02}
    assert hashed_val and hashed_val <= set(sub["val"]) and hashed_val <= set(files["val"])


# ---- batches -------------------------------------------------------------------------


def test_batch_is_pure_function_of_seed_and_step(small_stdlib: TokenDataset) -> None:
    x1, y1 = small_stdlib.get_batch("train", 7, 4, 32, seed=1)
    x2, y2 = small_stdlib.get_batch("train", 7, 4, 32, seed=1)
    assert torch.equal(x1, x2) and torch.equal(y1, y2)
    assert x1.dtype == torch.int64 and x1.shape == (4, 32) and x1.is_contiguous()
    x3, _ = small_stdlib.get_batch("train", 8, 4, 32, seed=1)
    x4, _ = small_stdlib.get_batch("train", 7, 4, 32, seed=2)
    assert not torch.equal(x1, x3) and not torch.equal(x1, x4)
    # Replaying step 7 after other steps gives the same data (no hidden RNG state).
    small_stdlib.get_batch("train", 100, 4, 32, seed=1)
    assert torch.equal(small_stdlib.get_batch("train", 7, 4, 32, seed=1)[0], x1)


def test_targets_are_inputs_shifted_by_one() -> None:
    ds = _arange_dataset()
    x, y = ds.get_batch("train", 3, 16, 20, seed=0)
    assert torch.equal(y, x + 1)
    assert torch.equal(x[:, 1:], x[:, :-1] + 1)  # contiguous windows
    assert int(y.max()) < ds.n_tokens("train")  # never reads past the end


def test_offsets_cover_the_whole_range() -> None:
    ds = _arange_dataset(50)
    starts = np.concatenate([ds.offsets("train", s, 64, 9) for s in range(20)])
    assert starts.min() == 0 and starts.max() == 50 - 9 - 1


def test_train_and_val_batches_differ_in_seed_stream() -> None:
    arr = np.arange(1000, dtype=np.uint16)
    ds = TokenDataset({"train": arr, "val": arr.copy()}, vocab_size=1000)
    assert not np.array_equal(ds.offsets("train", 0, 8, 10), ds.offsets("val", 0, 8, 10))


@pytest.mark.parametrize("world_size,n_micro", [(1, 1), (1, 4), (2, 1), (2, 2), (4, 2), (8, 1)])
def test_global_batch_independent_of_parallelism(world_size: int, n_micro: int) -> None:
    ds = _arange_dataset()
    full_x, full_y = ds.get_batch("train", 11, 16, 8, seed=3)
    parts_x, parts_y = [], []
    for rank in range(world_size):
        for i in range(n_micro):
            x, y = ds.get_batch(
                "train", 11, 16, 8, seed=3, micro=(i, n_micro), rank=rank, world_size=world_size
            )
            assert x.shape == (16 // (world_size * n_micro), 8)
            parts_x.append(x)
            parts_y.append(y)
    assert torch.equal(torch.cat(parts_x), full_x)
    assert torch.equal(torch.cat(parts_y), full_y)
    # Ranks see disjoint rows of the global batch.
    if world_size > 1:
        r0 = ds.get_batch("train", 11, 16, 8, seed=3, rank=0, world_size=world_size)[0]
        r1 = ds.get_batch("train", 11, 16, 8, seed=3, rank=1, world_size=world_size)[0]
        assert not torch.equal(r0, r1)


def test_batch_errors_name_the_bad_value(small_stdlib: TokenDataset) -> None:
    n = small_stdlib.n_tokens("val")
    with pytest.raises(ValueError, match=f"seq_len={n}"):
        small_stdlib.get_batch("val", 0, 2, n)
    small_stdlib.get_batch("val", 0, 2, n - 1)  # the longest that fits
    with pytest.raises(ValueError, match="'test'"):
        small_stdlib.get_batch("test", 0, 2, 8)
    with pytest.raises(ValueError, match="batch_size=6"):
        small_stdlib.get_batch("train", 0, 6, 8, world_size=4)
    with pytest.raises(ValueError, match=r"\(2, 2\)"):
        small_stdlib.get_batch("train", 0, 4, 8, micro=(2, 2))
    with pytest.raises(ValueError, match="rank=2"):
        small_stdlib.get_batch("train", 0, 4, 8, rank=2, world_size=2)
    with pytest.raises(ValueError, match="step must be"):
        small_stdlib.get_batch("train", -1, 4, 8)
    with pytest.raises(ValueError, match="batch_size must be"):
        small_stdlib.get_batch("train", 0, 0, 8)


# ---- user data -----------------------------------------------------------------------


def test_nanogpt_bin_folder_with_sidecar(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    train = rng.integers(0, 50_000, size=5000).astype(np.uint16)
    val = rng.integers(0, 50_000, size=600).astype(np.uint16)
    train.tofile(tmp_path / "train.bin")
    val.tofile(tmp_path / "val.bin")
    (tmp_path / "meta.json").write_text(json.dumps({"dtype": "uint16", "vocab_size": 50_257}))
    ds = load_dataset(DataConfig(source=str(tmp_path)))
    assert ds.vocab_size == 50_257
    assert ds.n_tokens("train") == 5000 and ds.n_tokens("val") == 600
    x, y = ds.get_batch("val", 0, 3, 10)
    off = ds.offsets("val", 0, 3, 10)
    assert x[0].tolist() == val[off[0] : off[0] + 10].tolist()
    assert y[2].tolist() == val[off[2] + 1 : off[2] + 11].tolist()


def test_single_bin_uint32_tail_split_and_inferred_vocab(tmp_path: Path) -> None:
    arr = (np.arange(1000, dtype=np.uint32) * 97) % 100_003
    arr.tofile(tmp_path / "tok.bin")
    ds = load_dataset(
        DataConfig(source=str(tmp_path / "tok.bin"), dtype="uint32", val_fraction=0.1)
    )
    assert ds.n_tokens("train") == 900 and ds.n_tokens("val") == 100
    assert ds.vocab_size == int(arr.max()) + 1
    assert ds.tokens("val")[0] == arr[900]


def test_wrong_dtype_is_caught(tmp_path: Path) -> None:
    np.arange(1001, dtype=np.uint16).tofile(tmp_path / "odd.bin")  # 2002 bytes
    with pytest.raises(ValueError, match="not a multiple of 4 \\(uint32\\)"):
        load_dataset(DataConfig(source=str(tmp_path / "odd.bin"), dtype="uint32"))
    # uint16 data read as uint32 gives huge ids, caught by the vocab check.
    (np.arange(1000, dtype=np.uint16) + 1).tofile(tmp_path / "t.bin")
    with pytest.raises(ValueError, match="wrong dtype"):
        load_dataset(DataConfig(source=str(tmp_path / "t.bin"), dtype="uint32", vocab_size=50_257))
    with pytest.raises(ValueError, match="'int8'"):
        load_dataset(DataConfig(source=str(tmp_path / "t.bin"), dtype="int8"))
    (tmp_path / "t.json").write_text(json.dumps({"dtype": "uint16"}))
    with pytest.raises(ValueError, match="contradicts"):
        load_dataset(DataConfig(source=str(tmp_path / "t.bin"), dtype="uint32"))


def test_text_file_and_folder(tmp_path: Path) -> None:
    (tmp_path / "one.txt").write_bytes(b"hello world " * 100)
    ds = load_dataset(DataConfig(source=str(tmp_path / "one.txt"), val_fraction=0.1))
    assert ds.vocab_size == 256
    assert ds.n_tokens("train") == 1080 and ds.n_tokens("val") == 120
    folder = tmp_path / "docs"
    folder.mkdir()
    for k in range(20):
        (folder / f"d{k:02d}.txt").write_text(f"document {k} " * 50)
    (folder / ".hidden").write_text("x")
    ds = load_dataset(DataConfig(source=str(folder), val_fraction=0.2))
    total = sum(len(f"document {k} " * 50) + 1 for k in range(20))
    assert ds.n_tokens("train") + ds.n_tokens("val") == total
    assert 0 < ds.n_tokens("val") < ds.n_tokens("train")


def test_bad_sources(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="does not exist"):
        load_dataset(DataConfig(source=str(tmp_path / "nope")))
    with pytest.raises(ValueError, match="val_fraction"):
        load_dataset(DataConfig(source=str(tmp_path), val_fraction=1.5))
    (tmp_path / "a.txt").write_text("abc")
    with pytest.raises(ValueError, match="vocab_size must be >= 256"):
        load_dataset(DataConfig(source=str(tmp_path / "a.txt"), vocab_size=100))
    with pytest.raises(ValueError, match="only 1 tokens|only 3 tokens"):
        load_dataset(DataConfig(source=str(tmp_path / "a.txt"), val_fraction=0.9))
