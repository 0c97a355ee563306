"""A Llama-3-sized vocabulary (128,256 tokens, past uint16) end to end: ``data prepare``
writes uint32 tokens whose top ids survive, ``train --set data=...`` trains on them (its
row names vocab 128,256 and the tokenizer), and the card made from those rows records the
proxy's vocabulary 128,256. The tokenizer is a word-level one built here (no download)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mutransfer.card.make import TransferRequest, make_card
from mutransfer.card.request import RunChoices
from mutransfer_cli import main

tokenizers = pytest.importorskip("tokenizers")
VOCAB = 128_256  # Llama 3's


def test_a_128k_vocabulary_is_prepared_trained_on_and_recorded(tmp_path: Path, monkeypatch) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = {f"w{i}": i for i in range(VOCAB - 2)} | {"[UNK]": VOCAB - 2, "<|end_of_text|>": VOCAB - 1}
    tk = Tokenizer(models.WordLevel(words, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tk.save(str(tmp_path / "tokenizer.json"))
    rng = random.Random(0)
    (tmp_path / "corpus").mkdir()
    for d in range(4):  # ids spread over the whole vocabulary, most of them past 65,535
        ids = [rng.randrange(VOCAB - 2) for _ in range(3000)] + [VOCAB - 3]
        (tmp_path / "corpus" / f"d{d}.txt").write_text(" ".join(f"w{i}" for i in ids), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    assert main(["data", "prepare", "--tokenizer", "tokenizer.json", "--text", "corpus",
                 "--out", "tokens.bin", "--val-fraction", "0.25", "--quiet"]) == 0
    side = json.loads(Path("tokens.bin.json").read_text())
    assert (side["dtype"], side["vocab_size"], side["eos"]["id"]) == ("uint32", VOCAB, VOCAB - 1)
    tokens = np.fromfile("tokens.bin", dtype=np.uint32)
    assert tokens.max() == VOCAB - 1 and (tokens > 65_535).mean() > 0.4 and (tokens == VOCAB - 3).sum() == 4
    rows = []
    for lr in (0.003, 0.01, 0.03):
        assert main(["train", "--preset", "gpt-tiny", "--set", "data=tokens.bin", "--set", "steps=2",
                     "--set", "width=32", "--set", "depth=1", "--set", "batch_size=2", "--set", "seq_len=16",
                     "--set", f"lr={lr}", "--set", "eval_every=2", "--out", f"run{lr}", "--quiet"]) == 0
        rows.append(json.loads(Path(f"run{lr}/result.json").read_text())["row"])
    assert {r["vocab_size"] for r in rows} == {VOCAB}
    assert {r["tokenizer"] for r in rows} == {side["tokenizer"]["hash"]}
    assert all(11.0 < r["train_loss"] < 12.5 for r in rows)  # ~ln 128,256 = 11.76 at init: the real readout
    pd.DataFrame(rows).to_csv("results.csv", index=False)
    card = make_card(TransferRequest(results="results.csv", preset="gpt-tiny",
                                     overrides={"width": 64, "depth": 1, "vocab_size": VOCAB},
                                     tokens_per_param=20.0, run=RunChoices(batch_sequences=8))).card
    assert card["source"]["proxy_vocab_size"] == VOCAB and card["target"]["model"]["vocab_size"] == VOCAB
    assert card["source"]["tokenizer"] == side["tokenizer"]["hash"]
