"""The card records what was measured: the proxy's vocabulary, tokenizer, context, dtype and
architecture go with every results row and every fit, and ``transfer`` reads them from there,
never from a preset (a 1B-shaped card once recorded the byte vocabulary 256, the proxy's 64-token
context, an unoptimised weight decay and another architecture's fit without a word).

Real parts end to end: a byte-level BPE of 8,192 tokens trained here with ``tokenizers`` (no
download), ``data prepare``'s own function, an ``hf:`` Llama proxy swept by ``sweep lr`` on
those tokens, ``sweep results``, ``fit optimum`` and ``transfer`` to a bigger Llama config."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import mutransfer_cli
from analysis.scaling_fit import ScalingLawFit
from mutransfer.card.build import load_card

pytest.importorskip("transformers", reason="the [engines] extra is not installed")
tokenizers = pytest.importorskip("tokenizers")

LLAMA = {"model_type": "llama", "vocab_size": 8192, "hidden_size": 128, "intermediate_size": 256,
         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
         "tie_word_embeddings": True, "max_position_embeddings": 2048, "rms_norm_eps": 1e-5}
BIG = dict(LLAMA, hidden_size=512, intermediate_size=1024, num_hidden_layers=4, num_attention_heads=16,
           num_key_value_heads=8)


def _config(folder: Path, fields: dict[str, Any]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(fields))
    return folder


def _main(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = mutransfer_cli.main(argv)
    return code, capsys.readouterr().err


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """An 8,192-token BPE, 20 stdlib files prepared with it, and an LR sweep of an ``hf:``
    Llama proxy (widths 64 and 128, depth 2, context 16) on those tokens, exported."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from mutransfer.training.corpus import stdlib_files
    from mutransfer.training.prepare import prepare_tokens

    root = tmp_path_factory.mktemp("records")
    base, rel = stdlib_files()
    texts, n = [], 0
    for r in rel:  # 1.5 MB of text: enough merges for the full 8,192
        texts.append((base / r).read_text(encoding="utf-8"))
        n += len(texts[-1])
        if n > 1_500_000:
            break
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tk.train_from_iterator(texts, trainer=trainers.BpeTrainer(
        vocab_size=8192, special_tokens=["<|endoftext|>"], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    assert tk.get_vocab_size() == 8192
    (root / "tok").mkdir()
    tk.save(str(root / "tok" / "tokenizer.json"))
    corpus = root / "corpus"
    corpus.mkdir()
    for i, t in enumerate(texts[:20]):
        (corpus / f"d{i}.py").write_text(t, encoding="utf-8")
    side = prepare_tokens(root / "tok" / "tokenizer.json", corpus, root / "tokens.bin", val_fraction=0.2)
    proxy = _config(root / "proxy", LLAMA)
    mp = pytest.MonkeyPatch()
    mp.setitem(mutransfer_cli.VERBS, "sweep", ("mutransfer_cli.sweep", "sweeps"))
    try:
        assert mutransfer_cli.main([
            "sweep", "lr", "--model", f"hf:{proxy}", "--widths", "64,128", "--lrs", "0.001,0.003,0.01",
            "--parametrization", "mup", "--seeds", "0", "--steps", "2", "--batch-size", "2",
            "--set", "seq_len=16", "--set", "eval_sequences=4", "--set", f"data={root / 'tokens.bin'}",
            "--device", "cpu", "--workers", "1", "--max-extend", "0", "--out", str(root / "lr"),
            "--quiet"]) == 0
        assert mutransfer_cli.main(["sweep", "results", "--storage", str(root / "lr"),
                                    "--out", str(root / "lr.csv")]) == 0
    finally:
        mp.undo()
    assert mutransfer_cli.main(["fit", "optimum", str(root / "lr.csv"), "--group", "width",
                                "--out", str(root / "opt.json"), "--quiet"]) == 0
    return {"root": root, "csv": root / "lr.csv", "fit": root / "opt.json", "proxy": proxy,
            "tok_hash": side["tokenizer"]["hash"]}


def test_every_row_and_fit_records_the_proxys_vocab_tokenizer_context_dtype_and_arch(swept) -> None:
    from mutransfer.models.source import parse_model

    df = pd.read_csv(swept["csv"])
    arch = parse_model(f"hf:{swept['proxy']}").model_id
    assert len(df) == 6
    assert set(df["vocab_size"]) == {8192} and set(df["tokenizer"]) == {swept["tok_hash"]}
    assert set(df["seq_len"]) == {16} and set(df["compute_dtype"]) == {"fp32"} and set(df["arch"]) == {arch}
    proxy = json.loads(swept["fit"].read_text())["proxy"]
    assert proxy == {"arch": arch, "tokenizer": swept["tok_hash"], "vocab_size": 8192, "seq_len": 16,
                     "compute_dtype": "fp32", "depth": 2}


@pytest.mark.parametrize("source", ["results", "fit"])
def test_the_card_takes_vocab_and_context_from_the_rows_not_a_preset(swept, source, tmp_path, capsys) -> None:
    """No --allow-vocab-change: the rows say 8,192 (a preset would say 256). The target's
    context is its config's max_position_embeddings (or --target-seq-len), the proxy's stays
    in source.seq_len, and the change is warned about by name."""
    big = _config(tmp_path / "big", BIG)
    src = ["--results", str(swept["csv"])] if source == "results" else ["--fit", str(swept["fit"])]
    base = ["transfer", *src, "--model", f"hf:{big}", "--tokens", "1e7", "--batch-size", "16"]
    code, err = _main([*base, "--out", str(tmp_path / "card.yaml")], capsys)
    assert code == 0, err
    card = load_card(tmp_path / "card.yaml")
    s, t = card["source"], card["target"]
    assert "vocab_change" not in t and s["proxy_vocab_size"] == 8192
    assert (s["tokenizer"], s["dtype"], s["seq_len"], s["base_depth"]) == (swept["tok_hash"], "fp32", 16, 2)
    assert s["arch"].startswith("hf:llama@") and s["preset"] is None
    assert (t["seq_len"], card["batch"]["seq_len"]) == (2048, 2048)
    assert "max_position_embeddings" in t["seq_len_from"]
    assert any("context changes from the proxy's 16 to the target's 2048" in w
               for w in card["projected"]["warnings"])

    code, err = _main([*base, "--target-seq-len", "512", "--out", str(tmp_path / "c512.yaml")], capsys)
    assert code == 0, err
    card = load_card(tmp_path / "c512.yaml")
    assert (card["target"]["seq_len"], card["source"]["seq_len"]) == (512, 16)
    assert card["schedule"]["total_steps"] == -(-10_000_000 // (16 * 512))
    # --seq-len is the proxy's context: one contradicting the rows is refused, naming both
    code, err = _main([*base, "--seq-len", "2048", "--out", str(tmp_path / "bad.yaml")], capsys)
    assert code == 2 and "--seq-len 2048 contradicts the proxy's context 16" in err
    assert "--target-seq-len" in err and not (tmp_path / "bad.yaml").exists()
    # --set seq_len=N is the one field --model takes
    code, err = _main([*base, "--set", "seq_len=256", "--out", str(tmp_path / "c256.yaml")], capsys)
    assert code == 0, err
    assert load_card(tmp_path / "c256.yaml")["target"]["seq_len"] == 256


def test_a_fit_of_another_architecture_is_refused_unless_allowed(swept, tmp_path, capsys) -> None:
    """The Llama rows into a Qwen2 card: exit 2 naming both; --allow-arch-change records
    and warns. A scaling fit of another architecture than the LR's rows: the same."""
    qwen = _config(tmp_path / "qwen", dict(BIG, model_type="qwen2"))
    base = ["transfer", "--results", str(swept["csv"]), "--model", f"hf:{qwen}", "--tokens", "1e7",
            "--batch-size", "16"]
    out = tmp_path / "q.yaml"
    code, err = _main([*base, "--out", str(out)], capsys)
    assert code == 2 and "hf:llama@" in err and "hf:qwen2@" in err and "--allow-arch-change" in err
    assert not out.exists()
    code, err = _main([*base, "--allow-arch-change", "--out", str(out)], capsys)
    assert code == 0, err
    change = load_card(out)["target"]["arch_change"]
    assert change["proxy"].startswith("hf:llama@") and change["target"].startswith("hf:qwen2@")
    assert "hf:qwen2@" in err and "--allow-arch-change" in err

    fit = tmp_path / "scaling.json"
    doc = {"kind": "scaling",
           "lr": {"coef": 0.5, "exponents": {"batch_tokens": 0.3, "tokens": -0.1}},
           "batch": {"coef": 2.0, "exponents": {"tokens": 0.4}},
           "tau": {"value": None}, "measured": {"tokens": [1e6, 8e6], "batch_tokens": [512, 8192]},
           "proxy": {"arch": "hf:qwen2@00000000"}}
    fit.write_text(json.dumps(doc))
    big = _config(tmp_path / "big", BIG)
    code, err = _main(["transfer", "--results", str(swept["csv"]), "--model", f"hf:{big}", "--tokens",
                       "1e7", "--scaling-fit", str(fit), "--out", str(tmp_path / "s.yaml")], capsys)
    assert code == 2 and "scaling fit" in err and "hf:qwen2@00000000" in err and "hf:llama@" in err


LAWS: dict[str, Any] = {
    "kind": "scaling",
    "lr": {"coef": 0.5, "exponents": {"batch_tokens": 0.3, "tokens": -0.1},
           "ci": {"batch_tokens": [0.25, 0.35], "tokens": [-0.15, -0.05]}},
    "batch": {"coef": 2.0, "exponents": {"tokens": 0.4}, "ci": {"tokens": [0.35, 0.45]}},
    "decay_fraction": {"value": 0.15, "ci": [0.1, 0.2]},
    "measured": {"tokens": [1e6, 8e6], "batch_tokens": [512, 8192], "seq_len": 64},
}
PLAN = {"proxy_lr": 0.01, "proxy_lr_interval": [0.005, 0.02], "seq_len": 64, "proxy_batch_tokens": 1024.0,
        "proxy_tokens": 2e6, "tokens": 2e8, "batch_sequences": 64}


def test_an_unoptimised_tau_gives_the_published_decay_named_and_warned(plan_kw) -> None:
    """tau at the sweep's one lambda ('default λ'): the card's eta·lambda per step is the
    published 4e-5 (not the 1/(tau·steps) that tau would give), the source names the
    recipes, a warning says so, and lambda gets no interval."""
    tau = {"value": 48.5, "ci": [40.0, 55.0], "source": "default λ"}
    laws = ScalingLawFit.from_dict({**LAWS, "tau": tau})
    plan = plan_kw(laws=laws, **PLAN)
    assert plan.lr * plan.weight_decay == pytest.approx(4e-5, rel=1e-12)
    assert plan.tau == pytest.approx(plan.batch_tokens / (4e-5 * 2e8), rel=1e-12)  # B / (eta·lambda·D)
    wd = plan.projected["weight_decay"]
    assert "OLMo-1B" in wd["source"] and "DeepSeek LLM 7B" in wd["source"]
    assert wd["lo"] is None and wd["hi"] is None
    held = plan.batch_tokens / (48.5 * 2e8)  # what holding the unoptimised tau would have given per step
    assert any(w.startswith("weight decay not optimised") and f"{held:.2g}" in w for w in plan.warnings)


def test_a_measured_tau_is_held_and_its_lambda_interval_includes_the_lrs(plan_kw) -> None:
    laws = ScalingLawFit.from_dict({**LAWS, "tau": {"value": 0.2, "ci": [0.15, 0.3], "source": "measured"}})
    plan = plan_kw(laws=laws, **PLAN)
    b, d = plan.batch_tokens, 2e8
    assert plan.weight_decay == pytest.approx(b / (plan.lr * 0.2 * d), rel=1e-12)
    assert not any("weight decay not optimised" in w for w in plan.warnings)
    wd, lr = plan.projected["weight_decay"], plan.projected["lr"]
    assert wd["lo"] == pytest.approx(b / (lr["hi"] * 0.3 * d), rel=1e-12)
    assert wd["hi"] == pytest.approx(b / (lr["lo"] * 0.15 * d), rel=1e-12)
    # wider than tau's own 2x: the LR's interval is in it
    assert wd["hi"] / wd["lo"] > (lr["hi"] / lr["lo"]) * 1.9
