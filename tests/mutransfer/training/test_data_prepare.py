"""`mutransfer data prepare`: text + a local tokenizer.json -> tokens.bin + sidecar, read back by
the loader and the trainer; the results row's tokenizer column; tables mixing tokenizers refused.

The tokenizer is a small byte-level BPE trained here, on a slice of the stdlib corpus, with
the real ``tokenizers`` library: nothing is downloaded."""

from __future__ import annotations

import hashlib
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from mutransfer.training.config import TrainConfig
from mutransfer.training.corpus import _split_by_file, stdlib_files
from mutransfer.training.data import DataConfig, load_dataset
from mutransfer.training.prepare import prepare_tokens
from mutransfer.training.train import train
from mutransfer_cli import main

EOS = "<|endoftext|>"


@pytest.fixture(scope="module")
def stdlib_texts() -> list[tuple[str, str]]:
    """(relative path, text) of stdlib files of 2-8 kB: small, real, UTF-8 Python source."""
    root, rel = stdlib_files()
    out = []
    for r in rel:
        if 2_000 <= (root / r).stat().st_size <= 8_000:
            out.append((r, (root / r).read_text(encoding="utf-8")))
        if len(out) == 40:
            break
    return out


@pytest.fixture(scope="module")
def tok_file(tmp_path_factory: pytest.TempPathFactory, stdlib_texts: list[tuple[str, str]]) -> Path:
    """A byte-level BPE of vocab 400 (256 bytes + merges + <|endoftext|>), saved as
    ``.../mybpe/tokenizer.json``."""
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=[EOS], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tk.train_from_iterator([t for _, t in stdlib_texts[8:]], trainer=trainer)
    path = tmp_path_factory.mktemp("tok") / "mybpe" / "tokenizer.json"
    path.parent.mkdir()
    tk.save(str(path))
    return path


@pytest.fixture
def corpus(tmp_path: Path, stdlib_texts: list[tuple[str, str]]) -> Path:
    """A folder of 8 stdlib files (nested, as a real corpus is)."""
    folder = tmp_path / "corpus"
    for i, (_, text) in enumerate(stdlib_texts[:8]):
        f = folder / f"part{i % 2}" / f"doc{i}.py"
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text, encoding="utf-8", newline="")
    return folder


def _docs(ids: np.ndarray, eos_id: int) -> list[np.ndarray]:
    cuts = np.flatnonzero(ids == eos_id)
    assert cuts.size and cuts[-1] == ids.size - 1, "every document ends with the end-of-text token"
    return np.split(ids, cuts + 1)[:-1]


@pytest.mark.parametrize("chunks", [{}, {"chunk_chars": 300, "batch_chars": 1_000}])
def test_prepare_round_trips_each_document_and_the_loader_splits_where_the_sidecar_says(
        tmp_path: Path, corpus: Path, tok_file: Path, chunks: dict[str, int]) -> None:
    out = tmp_path / "tokens.bin"
    side = prepare_tokens(tok_file, corpus, out, val_fraction=0.25, **chunks)
    tk = Tokenizer.from_file(str(tok_file))
    eos_id = tk.token_to_id(EOS)
    assert side == json.loads((tmp_path / "tokens.bin.json").read_text())
    assert side["dtype"] == "uint16" and side["vocab_size"] == tk.get_vocab_size() == 400
    assert side["tokenizer"]["sha256"] == hashlib.sha256(tok_file.read_bytes()).hexdigest()
    assert side["tokenizer"]["name"] == "mybpe"
    assert side["tokenizer"]["hash"] == side["tokenizer"]["sha256"][:12]
    assert side["eos"]["token"] == EOS and side["eos"]["id"] == eos_id
    ids = np.fromfile(out, dtype=np.uint16)
    assert side["n_tokens"] == ids.size and int(ids.max()) < 400

    # Documents come back in split order (train files, then val files by the loader's hash
    # rule), each decoding to its file's exact text, even when encoded in small pieces.
    names = sorted(p.relative_to(corpus).as_posix() for p in corpus.rglob("*.py"))
    split = _split_by_file(names, 0.25)
    order = split["train"] + split["val"]
    docs = _docs(ids, eos_id)
    assert len(docs) == len(order) == 8
    for name, doc in zip(order, docs, strict=True):
        assert tk.decode(doc[:-1].tolist(), skip_special_tokens=False) == (corpus / name).read_text()
    n_train = sum(d.size for d in docs[: len(split["train"])])
    assert side["split"]["val_start"] == n_train and side["split"]["n_val"] == ids.size - n_train
    assert side["n_documents"] == {"train": len(split["train"]), "val": len(split["val"])}

    ds = load_dataset(DataConfig(source=str(out)))
    assert ds.vocab_size == 400 and ds.tokenizer == side["tokenizer"]["hash"]
    assert ds.n_tokens("train") == n_train and ds.n_tokens("val") == ids.size - n_train
    first_val = docs[len(split["train"])]
    np.testing.assert_array_equal(ds.tokens("val")[: first_val.size], first_val)


def test_a_single_file_is_split_by_its_tail_like_the_loader_splits_bins(tmp_path: Path, tok_file: Path,
                                                                        stdlib_texts: list) -> None:
    text = tmp_path / "one.txt"
    text.write_text(stdlib_texts[0][1] + stdlib_texts[1][1], encoding="utf-8")
    side = prepare_tokens(tok_file, text, tmp_path / "one.bin", val_fraction=0.1)
    n = side["n_tokens"]
    assert side["split"]["n_val"] == math.ceil(n * 0.1) and side["n_documents"]["train"] == 1
    ds = load_dataset(DataConfig(source=str(tmp_path / "one.bin")))
    assert ds.n_tokens("val") == math.ceil(n * 0.1)


@pytest.mark.parametrize(("vocab", "dtype"), [(65_536, "uint16"), (65_537, "uint32")])
def test_dtype_is_the_smallest_that_holds_every_id(tmp_path: Path, vocab: int, dtype: str) -> None:
    words = {f"w{i}": i for i in range(vocab - 1)} | {"[UNK]": vocab - 1}
    tk = Tokenizer(models.WordLevel(words, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tk.save(str(tmp_path / "wl.json"))
    (tmp_path / "t.txt").write_text(" ".join(["w1", f"w{vocab - 2}", "zzz"] * 20), encoding="utf-8")
    side = prepare_tokens(tmp_path / "wl.json", tmp_path / "t.txt", tmp_path / "t.bin", eos=None,
                          val_fraction=0.1)
    assert side["dtype"] == dtype and side["vocab_size"] == vocab and side["eos"] is None
    ids = np.fromfile(tmp_path / "t.bin", dtype=dtype)
    np.testing.assert_array_equal(ids[:3], [1, vocab - 2, vocab - 1])  # the top id survives the dtype
    assert load_dataset(DataConfig(source=str(tmp_path / "t.bin"))).vocab_size == vocab


def test_trainer_takes_the_vocab_from_the_sidecar_and_the_row_names_the_tokenizer(
        tmp_path: Path, corpus: Path, tok_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "tokens.bin"
    assert main(["data", "prepare", "--tokenizer", str(tok_file.parent), "--text", str(corpus),
                 "--out", str(out), "--val-fraction", "0.25", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["vocab_size"] == 400 and summary["n_tokens"] == out.stat().st_size // 2
    tiny = dict(preset="gpt-tiny", width=32, depth=1, head_dim=16, seq_len=32, batch_size=4, steps=4,
                lr=1e-2, eval_every=4, eval_sequences=8, threads=1)
    r = train(TrainConfig.from_flat({**tiny, "data": str(out)}))
    row = r.to_row()
    assert row["tokenizer"] == summary["tokenizer"] == hashlib.sha256(tok_file.read_bytes()).hexdigest()[:12]
    # The readout has one row per token of the sidecar's vocab; the first loss is ~ln 400.
    assert row["n_params"] - row["n_params_nonembed"] in (400 * 32, 2 * 400 * 32)
    assert r.history[0]["loss"] == pytest.approx(math.log(400), abs=0.7)
    assert math.isfinite(row["loss"]) and not r.diverged
    # Bytes and a bare .bin without a sidecar (its dtype given) are named as such; without
    # dtype= a .bin with no sidecar is refused (a half-written `data prepare`).
    (tmp_path / "t.txt").write_bytes(b"hello world\n" * 100)
    assert load_dataset(DataConfig(source=str(tmp_path / "t.txt"))).tokenizer == "bytes"
    shutil.copy(out, tmp_path / "bare.bin")
    assert load_dataset(DataConfig(source=str(tmp_path / "bare.bin"), dtype="uint16")).tokenizer == "unknown"
    with pytest.raises(ValueError, match="bare.bin has no sidecar"):
        load_dataset(DataConfig(source=str(tmp_path / "bare.bin")))


def test_a_stale_sidecar_is_refused(tmp_path: Path, corpus: Path, tok_file: Path) -> None:
    out = tmp_path / "tokens.bin"
    prepare_tokens(tok_file, corpus, out, val_fraction=0.25)
    with open(out, "ab") as fh:
        fh.write(b"\x01\x00")
    with pytest.raises(ValueError, match="n_tokens"):
        load_dataset(DataConfig(source=str(out)))


def _fails(argv: list[str], capsys: pytest.CaptureFixture[str], *needles: str) -> None:
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err, err
    for n in needles:
        assert n in err, (n, err)


def test_bad_input_exits_2_naming_the_value_and_writes_nothing(
        tmp_path: Path, corpus: Path, tok_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "o" / "t.bin"
    base = ["data", "prepare", "--out", str(out)]
    tok = ["--tokenizer", str(tok_file)]
    _fails([*base, "--tokenizer", str(tmp_path / "nope.json"), "--text", str(corpus)], capsys,
           "nope.json", "does not exist")
    for hub in ("gpt2", "meta-llama/Llama-3.1-8B"):
        _fails([*base, "--tokenizer", hub, "--text", str(corpus)], capsys, repr(hub), "hub id")
    (tmp_path / "empty.txt").write_text("")
    _fails([*base, *tok, "--text", str(tmp_path / "empty.txt")], capsys, "empty.txt", "no text")
    (tmp_path / "blank").mkdir()
    _fails([*base, *tok, "--text", str(tmp_path / "blank")], capsys, "blank", "no text files")
    same = tmp_path / "same.bin"
    same.write_text("some text\n" * 50)
    _fails(["data", "prepare", *tok, "--text", str(same), "--out", str(same)], capsys, "same.bin", "input")
    assert same.read_text() == "some text\n" * 50
    _fails([*base[:-1], str(tmp_path / "t.npy"), *tok, "--text", str(corpus)], capsys, "t.npy", ".bin")
    (corpus / "bad.txt").write_bytes(b"caf\xe9\n")
    _fails([*base, *tok, "--text", str(corpus)], capsys, "bad.txt", "UTF-8")
    (corpus / "bad.txt").unlink()
    _fails([*base, *tok, "--text", str(corpus), "--eos", "<nope>"], capsys, "<nope>", "not a token")
    (tmp_path / "junk.json").write_text("{}")
    _fails([*base, "--tokenizer", str(tmp_path / "junk.json"), "--text", str(corpus)], capsys, "junk.json")
    assert not out.exists() and (not out.parent.exists() or not list(out.parent.iterdir()))


def _sweep(tokenizer: str, model: str = "gpt") -> pd.DataFrame:
    lrs = 2.0 ** np.arange(-12, -6)
    return pd.DataFrame([{"width": w, "lr": lr, "loss": 3 + 0.02 * (np.log2(lr) + 9.3) ** 2,
                          "diverged": False, "tokenizer": tokenizer, "arch": model}
                         for w in (64, 128) for lr in lrs])


def test_fit_refuses_a_table_that_mixes_tokenizers(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    mixed = tmp_path / "mixed.csv"
    pd.concat([_sweep("bytes"), _sweep("3f2a9c01bb7e")]).to_csv(mixed, index=False)
    fit = ["fit", "optimum", str(mixed), "--group", "width", "--n-boot", "20", "--json"]
    _fails(fit, capsys, "'tokenizer'", "'bytes'", "'3f2a9c01bb7e'", "mixed.csv")
    capsys.readouterr()
    assert main([*fit, "--where", "tokenizer=bytes"]) == 0
    assert len(json.loads(capsys.readouterr().out)["fits"]) == 2
    assert main([*fit[:4], "width,tokenizer", *fit[5:]]) == 0  # one fit per tokenizer: not mixed
    assert len(json.loads(capsys.readouterr().out)["fits"]) == 4
    models_ = tmp_path / "models.csv"
    pd.concat([_sweep("bytes", "gpt"), _sweep("bytes", "llama")]).to_csv(models_, index=False)
    _fails(["fit", "optimum", str(models_), "--group", "width", "--n-boot", "20", "--json"], capsys,
           "'arch'", "'llama'")
    # One tokenizer, or no tokenizer column at all, is fine.
    plain = tmp_path / "plain.csv"
    _sweep("bytes").drop(columns=["tokenizer", "arch"]).to_csv(plain, index=False)
    assert main(["fit", "optimum", str(plain), "--group", "width", "--n-boot", "20",
                 "--out", str(tmp_path / "g.json")]) == 0


# ---- whole or absent (issue: a half-written dataset) -----------------------------------------

def _big_text(tmp_path: Path, stdlib_texts: list[tuple[str, str]]) -> Path:
    text = tmp_path / "big.txt"
    text.write_text("".join(t for _, t in stdlib_texts) * 2, encoding="utf-8")
    return text


def test_a_bin_without_its_sidecar_or_of_an_unknown_format_is_refused_by_train(
        tmp_path: Path, corpus: Path, tok_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "tokens.bin"
    prepare_tokens(tok_file, corpus, out, val_fraction=0.25)
    side = out.with_name("tokens.bin.json")
    doc = json.loads(side.read_text())
    train = ["train", "--set", f"data={out}", "--set", "width=32", "--set", "depth=1", "--set", "steps=1",
             "--set", "seq_len=16", "--quiet"]
    side.write_text(json.dumps({**doc, "format": 99}))
    assert main(train) == 2
    err = capsys.readouterr().err
    assert "has format 99" in err and str(out) in err and len(err.strip().splitlines()) == 1
    side.unlink()
    assert main(train) == 2
    err = capsys.readouterr().err
    assert f"{out} has no sidecar (tokens.bin.json)" in err and len(err.strip().splitlines()) == 1


def test_a_dataset_too_small_to_split_is_refused(tmp_path: Path, tok_file: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "two.txt").write_text("ab", encoding="utf-8")
    out = tmp_path / "two.bin"
    assert main(["data", "prepare", "--tokenizer", str(tok_file), "--text", str(tmp_path / "two.txt"),
                 "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "two.txt' gives only" in err and "each needs at least 2" in err and not out.exists()


def test_stale_temp_files_of_a_killed_prepare_are_removed(tmp_path: Path, corpus: Path,
                                                         tok_file: Path) -> None:
    import os

    out = tmp_path / "tokens.bin"
    dead = tmp_path / ".tokens.bin.999999999.0a1b2c3d.tmp"  # a pid that cannot exist
    older = tmp_path / ".tokens.bin.k2j3h4g5.tmp"  # an older version's atomic temp
    live = tmp_path / f".tokens.bin.{os.getpid()}.0a1b2c3d.tmp"  # a run still going
    other = tmp_path / ".other.bin.k2j3h4g5.tmp"  # not ours to touch
    for p in (dead, older, live, other):
        p.write_bytes(b"\0" * 1000)
    prepare_tokens(tok_file, corpus, out, val_fraction=0.25)
    assert not dead.exists() and not older.exists() and live.exists() and other.exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("tokens")) == [
        "tokens.bin", "tokens.bin.json"]


def test_sigterm_mid_prepare_leaves_no_bin_and_the_next_run_cleans_up(
        tmp_path: Path, tok_file: Path, stdlib_texts: list[tuple[str, str]]) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    text = _big_text(tmp_path, stdlib_texts)
    out = tmp_path / "o" / "tokens.bin"
    argv = [sys.executable, "-m", "mutransfer_cli", "data", "prepare", "--tokenizer", str(tok_file),
            "--text", str(text), "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    proc = subprocess.Popen(argv, env=env, stderr=subprocess.DEVNULL)
    deadline = time.time() + 30
    while time.time() < deadline and not list(out.parent.glob(".tokens.bin.*.tmp")) and proc.poll() is None:
        time.sleep(0.005)
    if proc.poll() is not None:
        pytest.skip("prepare finished before a SIGTERM could land")
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)
    assert not out.exists()  # whole or absent
    assert subprocess.run(argv, env=env, capture_output=True).returncode == 0
    assert not list(out.parent.glob(".*.tmp")) and out.exists() and out.with_name("tokens.bin.json").exists()


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare for a private tmpfs")
def test_a_full_disk_names_the_file_and_leaves_no_bin_without_its_sidecar(
        tmp_path: Path, tok_file: Path, stdlib_texts: list[tuple[str, str]]) -> None:
    """On a tmpfs the .bin exactly fills (the sidecar has no room): exit 2 naming the sidecar,
    and no .bin. In a private mount namespace (unshare -rm): nothing to unmount after."""
    import subprocess
    import sys

    text = _big_text(tmp_path, stdlib_texts)
    size = prepare_tokens(tok_file, text, tmp_path / "probe.bin")["n_tokens"] * 2
    pages = -(-size // 4096) * 4096
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    root = Path(__file__).resolve().parents[3]
    script = (f"mount -t tmpfs -o size={pages + 16 * 4096} tmpfs {mnt} || exit 77; "
              f"head -c {16 * 4096} /dev/zero > {mnt}/filler; "
              f"PYTHONPATH={root} {sys.executable} -m mutransfer_cli data prepare --tokenizer {tok_file} "
              f"--text {text} --out {mnt}/d/t.bin; echo rc=$?; ls -a {mnt}/d")
    res = subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True)
    if res.returncode == 77 or "rc=" not in res.stdout:
        pytest.skip(f"cannot mount a private tmpfs here: {res.stderr[-300:]}")
    lines = res.stdout.split()
    assert "rc=2" in lines, res.stdout + res.stderr
    err = res.stderr.strip().splitlines()
    assert err == [f"mutransfer data: error: {mnt}/d/t.bin.json: No space left on device"], err
    assert "t.bin" not in lines and not [n for n in lines if n.endswith(".tmp")], lines
