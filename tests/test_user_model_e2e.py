"""A new user's day with their own model: a tiny Llama-shaped config.json written locally
(vocab 256 on the embedded byte corpus, 2 layers, head_dim 16, GQA 2:1) goes through
``coord-check``, ``sweep lr``, ``sweep results``, ``sweep scaling`` and ``fit scaling`` with
``--model hf:PATH``; and every bad model exits 2 with one line naming it."""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers", reason="the [engines] extra (transformers) is not installed")

import mutransfer_cli  # noqa: E402

LLAMA = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 256,
         "max_position_embeddings": 64, "tie_word_embeddings": False}


@pytest.fixture
def llama(tmp_path: Path) -> str:
    d = tmp_path / "my-llama"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(LLAMA))
    return f"hf:{d}"


@pytest.fixture
def _verb(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(mutransfer_cli.VERBS, "sweep", ("mutransfer_cli.sweep", "sweeps"))


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict:
    assert mutransfer_cli.main(argv) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


@pytest.mark.slow
def test_users_day_with_a_local_hf_llama(llama: str, tmp_path: Path, capsys, _verb) -> None:
    cc = ["coord-check", "--model", llama, "--widths", "32,64,128", "--n-seeds", "2", "--steps", "3",
          "--seq-len", "32", "--batch-size", "4", "--no-plot", "--json"]
    assert _run([*cc, "--out", str(tmp_path / "cc_mup")], capsys)["passed"] is True
    assert _run([*cc, "-p", "sp", "--out", str(tmp_path / "cc_sp")], capsys)["passed"] is False

    out = tmp_path / "lr"
    st = _run(["sweep", "lr", "--model", llama, "--widths", "32,64,128", "--lrs", "0.003,0.03",
               "--parametrization", "mup", "--seeds", "0", "--steps", "4", "--batch-size", "4",
               "--set", "seq_len=32", "--set", "eval_sequences=8", "--device", "cpu", "--workers", "1",
               "--out", str(out), "--quiet", "--json"], capsys)
    assert st["counts"]["complete"] == 3 * 2
    csv = tmp_path / "lr.csv"
    assert mutransfer_cli.main(["sweep", "results", "--storage", str(out), "--out", str(csv)]) == 0
    from analysis.results import read_results

    df = read_results(csv)
    model_id = df["arch"].unique()
    assert len(model_id) == 1 and model_id[0].startswith("hf:llama@")
    assert sorted(set(df["width"])) == [32, 64, 128] and df["loss"].map(math.isfinite).all()
    # the trials trained the user's model: GQA 2:1 at head_dim 16 has these parameter counts
    for w, n in df.groupby("width")["n_params"].first().items():
        emb = 256 * w
        attn = 2 * (w * w + w * w // 2)  # q, o: w x w; k, v: w x w/2
        mlp = 3 * w * 2 * w
        norms = 2 * 2 * w + w
        assert n == emb + 2 * (attn + mlp) + norms + 256 * w, w

    sc = tmp_path / "sc"
    st = _run(["sweep", "scaling", "--model", llama, "--width", "32", "--batch-sizes", "2,4,8",
               "--tokens", "256,512,1024", "--lr-center", "0.01", "--log2-lr-offsets=-1,0,1",
               "--set", "seq_len=16", "--eval-sequences", "8", "--device", "cpu", "--workers", "1",
               "--max-extend", "0",  # the grid as given (extension: tests/sweeps/test_extend.py)
               "--out", str(sc), "--quiet", "--json"], capsys)
    assert st["counts"]["complete"] == 3 * 3
    csv2, fit = tmp_path / "sc.csv", tmp_path / "fit.json"
    assert mutransfer_cli.main(["sweep", "results", "--storage", str(sc), "--out", str(csv2)]) == 0
    assert len(read_results(csv2)) == 9 * 3  # one row per WSD branch
    assert mutransfer_cli.main(["fit", "scaling", str(csv2), "--out", str(fit), "--n-boot", "20"]) == 0
    doc = json.loads(fit.read_text())
    assert doc["n_rows"] == 27 and math.isfinite(doc["lr"]["exponents"]["tokens"])



@pytest.mark.slow
def test_users_day_with_the_builtin_llama_fused(tmp_path: Path, capsys, _verb) -> None:
    """The built-in Llama-shaped preset takes the same path with fused training: the
    coordinate check's verdicts, a fused LR sweep over 3 widths equal to the unfused one
    (same losses), then a fused scaling sweep and its fit."""
    cc = ["coord-check", "--model", "llama-tiny", "--widths", "32,64,128", "--n-seeds", "2", "--steps", "3",
          "--seq-len", "32", "--batch-size", "4", "--no-plot", "--json"]
    assert _run([*cc, "--out", str(tmp_path / "cc_mup")], capsys)["passed"] is True
    assert _run([*cc, "-p", "sp", "--out", str(tmp_path / "cc_sp")], capsys)["passed"] is False

    from analysis.results import read_results

    losses = {}
    for fuse in ("1", "2"):
        out = tmp_path / f"lr{fuse}"
        st = _run(["sweep", "lr", "--model", "llama-tiny", "--widths", "32,64,128", "--lrs", "0.003,0.03",
                   "--parametrization", "mup", "--seeds", "0", "--steps", "4", "--batch-size", "4",
                   "--set", "seq_len=32", "--set", "eval_sequences=8", "--device", "cpu", "--workers", "1",
                   "--fuse", fuse, "--max-extend", "0", "--out", str(out), "--quiet", "--json"], capsys)
        assert st["counts"]["complete"] == 3 * 2
        csv = tmp_path / f"lr{fuse}.csv"
        assert mutransfer_cli.main(["sweep", "results", "--storage", str(out), "--out", str(csv)]) == 0
        df = read_results(csv)
        assert set(df["arch"]) == {"llama-tiny"}
        losses[fuse] = df.sort_values(["width", "lr"])["loss"].tolist()
    assert losses["2"] == losses["1"]  # fused members train exactly as separate runs

    sc = tmp_path / "sc"
    st = _run(["sweep", "scaling", "--model", "llama-tiny", "--width", "32", "--batch-sizes", "2,4,8",
               "--tokens", "256,512,1024", "--lr-center", "0.01", "--log2-lr-offsets=-1,0,1",
               "--set", "seq_len=16", "--eval-sequences", "8", "--device", "cpu", "--workers", "1",
               "--fuse", "3", "--max-extend", "0", "--out", str(sc), "--quiet", "--json"], capsys)
    assert st["counts"]["complete"] == 3 * 3
    csv2, fit = tmp_path / "sc.csv", tmp_path / "fit.json"
    assert mutransfer_cli.main(["sweep", "results", "--storage", str(sc), "--out", str(csv2)]) == 0
    assert mutransfer_cli.main(["fit", "scaling", str(csv2), "--out", str(fit), "--n-boot", "20"]) == 0
    doc = json.loads(fit.read_text())
    assert doc["n_rows"] == 27 and math.isfinite(doc["lr"]["exponents"]["tokens"])


LLAMA_1B = {"model_type": "llama", "vocab_size": 128256, "hidden_size": 2048, "intermediate_size": 8192,
            "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64,
            "tie_word_embeddings": True, "max_position_embeddings": 131072, "rms_norm_eps": 1e-5}


@pytest.mark.slow
def test_the_card_for_a_1b_llama_goes_to_all_three_engines(tmp_path: Path, capsys, _verb) -> None:
    """The other half of the chain: a swept Llama-shaped proxy, then ``transfer --model
    hf:`` for a Llama-3.2-1B-shaped config (vocab 128,256, 16 layers, GQA 32/8, tied), and
    the card exported to hf, torchtitan and megatron, each accepted by the real package's
    config classes (megatron-core's own build: tests/mutransfer/card/test_export_megatron.py)."""
    import dataclasses

    import transformers

    from mutransfer.card.build import load_card

    proxy = tmp_path / "proxy"
    proxy.mkdir()
    # the 1B's shape scaled down: head_dim 64, GQA 4:1 from width 256
    (proxy / "config.json").write_text(json.dumps(dict(LLAMA_1B, vocab_size=256, hidden_size=256,
                                                       intermediate_size=1024, num_hidden_layers=2,
                                                       num_attention_heads=4, num_key_value_heads=1,
                                                       max_position_embeddings=64)))
    lr = tmp_path / "lr"
    _run(["sweep", "lr", "--model", f"hf:{proxy}", "--widths", "256,512", "--lrs", "0.003,0.01,0.03",
          "--parametrization", "mup", "--seeds", "0", "--steps", "3", "--batch-size", "2",
          "--set", "seq_len=16", "--set", "eval_sequences=8", "--device", "cpu", "--workers", "1",
          "--max-extend", "0", "--out", str(lr), "--quiet", "--json"], capsys)
    csv = tmp_path / "lr.csv"
    assert mutransfer_cli.main(["sweep", "results", "--storage", str(lr), "--out", str(csv)]) == 0
    big = tmp_path / "llama-1b"
    big.mkdir()
    (big / "config.json").write_text(json.dumps(LLAMA_1B))
    card_path = tmp_path / "card.yaml"
    argv = ["transfer", "--results", str(csv), "--model", f"hf:{big}", "--tokens-per-param", "20",
            "--batch-size", "512", "--target-seq-len", "2048", "--base-width", "256", "--base-depth", "2",
            "--weight-decay", "0.1", "--dp-size", "8", "--micro-batch", "4", "--out", str(card_path)]
    assert mutransfer_cli.main(argv) == 2  # the byte-level proxy's vocab is not Llama's
    assert "--allow-vocab-change" in capsys.readouterr().err and not card_path.exists()
    assert mutransfer_cli.main([*argv, "--allow-vocab-change"]) == 0, capsys.readouterr().err
    card = load_card(card_path)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**LLAMA_1B))
    names = sorted(n for n, _ in model.named_parameters())
    assert sorted(g["name"] for g in card["param_groups"]) == names  # each parameter once, HF's names
    assert card["batch"]["sequences"] == 512 and card["batch"]["grad_accum"] == 16

    exports = {}
    for engine, drops in (("hf", []), ("torchtitan", []),
                          ("megatron", ["init"])):
        out = tmp_path / f"{engine}.json"
        flags = [x for d in drops for x in ("--drop", d)]
        assert mutransfer_cli.main(["export", str(card_path), "--to", engine, *flags, "--out", str(out),
                                    "--quiet"]) == 0, capsys.readouterr().err
        exports[engine] = json.loads(out.read_text())
    hf_args = exports["hf"]["training_arguments"]
    args = transformers.TrainingArguments(output_dir=str(tmp_path / "hf"), **hf_args)
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps) == (4, 16)
    from torchtitan.components.optimizer.optimizer import OptimizersContainer

    fields = {f.name for f in dataclasses.fields(OptimizersContainer.Config)}
    assert set(exports["torchtitan"]["optimizer"]) <= fields
    # torchtitan's own names: the readout is `output`, the tied embedding `tok_embeddings`
    patterns = " ".join(g["pattern"] for g in exports["torchtitan"]["optimizer"]["param_groups"])
    assert "tok_embeddings" in patterns and "layers" in patterns
    t = exports["megatron"]["transformer_config"]
    assert (t["num_layers"], t["hidden_size"], t["num_query_groups"], t["kv_channels"]) == (16, 2048, 8, 64)
    assert exports["megatron"]["gpt_model"]["share_embeddings_and_output_weights"] is True
    assert {d["field"] for d in exports["megatron"]["dropped"]} == {"init"}
    # CompleteP's (16/2)^-1 on every branch, folded into o_proj and down_proj: LR / 8
    down = next(g for g in card["param_groups"] if g["name"] == "model.layers.0.mlp.down_proj.weight")
    fc2 = next(o for o in exports["megatron"]["config_overrides"] if o["name"] == "*.mlp.linear_fc2.weight")
    assert fc2["override"]["max_lr"] == pytest.approx(down["lr"] / 8, rel=1e-12)

BUILDERS = '''
import torch.nn as nn

def boom(width, depth):
    raise RuntimeError("kaputt")

def no_logits(width, depth):
    return nn.Embedding(256, width)  # [B, T, width]: not [B, T, V] logits... and no .logits

def gives_str(width, depth):
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.e = nn.Embedding(256, width)

        def forward(self, x):
            return "logits"
    return M()
'''


@pytest.mark.parametrize("verb", ["train", "coord-check", "sweep-lr"])
@pytest.mark.parametrize("model, needle", [
    ("hf:meta-llama/Llama-3.2-1B", "'hf:meta-llama/Llama-3.2-1B'"),
    ("UNKNOWN_TYPE", "'llamazing'"),
    ("no_such_pkg_xyz:build", "'no_such_pkg_xyz:build'"),
    ("user_bad_builders:boom", "'user_bad_builders:boom'"),
    ("user_bad_builders:gives_str", "'user_bad_builders:gives_str'"),
    ("WIDTH", "num_key_value_heads"),
])
def test_bad_models_exit_2_naming_them(verb: str, model: str, needle: str, tmp_path: Path, capsys,
                                       monkeypatch: pytest.MonkeyPatch, _verb) -> None:
    (tmp_path / "user_bad_builders.py").write_text(BUILDERS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "user_bad_builders", raising=False)
    if model == "UNKNOWN_TYPE":
        (tmp_path / "config.json").write_text(json.dumps({**LLAMA, "model_type": "llamazing"}))
        model = f"hf:{tmp_path}"
    width = "48" if model == "WIDTH" else "32"  # 48: 3 heads, 1.5 KV heads
    if model == "WIDTH":
        (tmp_path / "config.json").write_text(json.dumps(LLAMA))
        model = f"hf:{tmp_path}"
    out = str(tmp_path / "out")
    argv = {"train": ["train", "--model", model, "--set", f"width={width}", "--set", "steps=1",
                      "--out", out],
            "coord-check": ["coord-check", "--model", model, "--widths", f"32,{width}", "--out", out],
            "sweep-lr": ["sweep", "lr", "--model", model, "--widths", f"32,{width}", "--lrs", "0.01",
                         "--steps", "1", "--out", out, "--workers", "1", "--quiet"]}[verb]
    assert mutransfer_cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "out" / "optuna.journal").exists()


def test_builder_without_logits_exits_2(tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "user_bad_builders.py").write_text(BUILDERS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "user_bad_builders", raising=False)
    assert mutransfer_cli.main(["train", "--model", "user_bad_builders:no_logits", "--set", "steps=1"]) == 2
    err = capsys.readouterr().err
    assert "'user_bad_builders:no_logits'" in err and "[1, 2, 256]" in err


def test_fused_sweep_refuses_a_user_model(llama: str, tmp_path: Path, capsys, _verb) -> None:
    assert mutransfer_cli.main(["sweep", "lr", "--model", llama, "--widths", "32,64", "--lrs", "0.01",
                                "--steps", "1", "--fuse", "4", "--out", str(tmp_path / "o"),
                                "--workers", "1", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--fuse 4" in err and "our own GPT" in err and len(err.splitlines()) == 1


def test_audit_takes_the_same_model_names(llama: str, capsys) -> None:
    """``audit --model hf:PATH`` audits mutransfer's own μP on the user's model (it passes);
    ``--entry`` stays the builder form's alias, one of the two."""
    assert mutransfer_cli.main(["audit", "--model", llama, "--widths", "32,64,128", "--no-coord-check",
                                "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["passed"] is True
    assert mutransfer_cli.main(["audit", "--model", llama, "--entry", "x:y"]) == 2
    assert mutransfer_cli.main(["audit", "--model", "hf:no/such-hub-id"]) == 2
    assert "'hf:no/such-hub-id'" in capsys.readouterr().err


# ---- real 1B-class HF families (GQA, tying, biases, rope scaling), sweep -> transfer -> every engine

# The released models' config.json fields (mutransfer.models.hf_families.RELEASED), narrowed in
# width only: the same depth, GQA ratio, MLP ratio, attention width over hidden, tying, biases,
# norms, RoPE base and scaling, soft-caps and sliding windows; head_dim is a width dimension
# here, kept fixed across the proxy's widths (the keep_head_dim rule). Vocabularies are the
# released ones where the test affords them (Llama's and Qwen's 128-152k take 512).
WIDTH_FIELDS = {"hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim",
                "query_pre_attn_scalar", "vocab_size"}


def narrowed(name: str, **sizes: int) -> dict:
    """RELEASED[name] with ``sizes`` (width fields only) replaced."""
    from mutransfer.models.hf_families import RELEASED

    assert set(sizes) <= WIDTH_FIELDS, set(sizes) - WIDTH_FIELDS
    return {**RELEASED[name], **sizes}


def _shape_rules(c: dict) -> tuple:
    heads, kv = c["num_attention_heads"], c["num_key_value_heads"]
    hd = c.get("head_dim") or c["hidden_size"] // heads
    return (c["intermediate_size"] / c["hidden_size"], heads / kv, heads * hd / c["hidden_size"],
            c.get("query_pre_attn_scalar", hd) / hd)


LLAMA_32_1B = narrowed("llama-3.2-1b", vocab_size=512, hidden_size=256, intermediate_size=1024,
                       num_attention_heads=8, num_key_value_heads=2, head_dim=32)
QWEN_25_05B = narrowed("qwen2.5-0.5b", vocab_size=512, hidden_size=224, intermediate_size=1216,
                       num_attention_heads=14, num_key_value_heads=2)
GEMMA_2_2B = narrowed("gemma-2-2b", hidden_size=144, intermediate_size=576, head_dim=16,
                      query_pre_attn_scalar=16)
MISTRAL_7B_V03 = narrowed("mistral-7b-v0.3", hidden_size=128, intermediate_size=448, num_attention_heads=8,
                          num_key_value_heads=2)
PHI_3_MINI = narrowed("phi-3-mini-4k", hidden_size=96, intermediate_size=256, num_attention_heads=6,
                      num_key_value_heads=6)
OLMO_2_1B = narrowed("olmo-2-1b", hidden_size=128, intermediate_size=512, num_attention_heads=8,
                     num_key_value_heads=8)
# (config, proxy widths: multiples of heads-per-KV-head x head_dim that keep the MLP whole)
FAMILIES = {"llama-3.2-1b": (LLAMA_32_1B, (128, 256)), "qwen2.5-0.5b": (QWEN_25_05B, (112, 224)),
            "gemma-2-2b": (GEMMA_2_2B, (72, 144)), "mistral-7b-v0.3": (MISTRAL_7B_V03, (64, 128)),
            "phi-3-mini-4k": (PHI_3_MINI, (48, 96)), "olmo-2-1b": (OLMO_2_1B, (64, 128))}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_each_family_is_its_released_shape_narrowed(family: str) -> None:
    """The test's configs keep every released field but width ones, and the released shape
    rules: MLP ratio, GQA ratio, attention width over hidden (Gemma-2's 8/9), the query
    pre-attention scalar over head_dim; the proxy widths keep them too (whole heads)."""
    from mutransfer.models.hf_families import RELEASED
    from mutransfer.models.source import hf_proxy_config

    config, widths = FAMILIES[family]
    released = RELEASED[family]
    assert {k for k in released if config[k] != released[k]} <= WIDTH_FIELDS
    assert set(config) - set(released) <= {"head_dim"}
    assert _shape_rules(config) == pytest.approx(_shape_rules(released), rel=1e-12)
    assert config["num_hidden_layers"] == released["num_hidden_layers"]
    assert widths[-1] == config["hidden_size"]
    import transformers

    full = transformers.AutoConfig.for_model(**config)
    for w in widths:
        proxy = hf_proxy_config(full, w, 2).to_dict()
        proxy.setdefault("head_dim", config.get("head_dim")
                         or config["hidden_size"] // config["num_attention_heads"])
        assert _shape_rules(proxy) == pytest.approx(_shape_rules(released), rel=1e-12), w


MEGATRON_DROPS = ("init",)  # LR, eps, decay and the folded residual multiplier are carried
# The engines that build each family's decoder (hf builds every one); the others refuse its card
# at export, in one line naming the card field, with advice naming only engines that take it.
ACCEPTS = {"llama": {"hf", "torchtitan", "megatron"}, "qwen2": {"hf", "megatron"},
           "mistral": {"hf", "torchtitan", "megatron"}, "gemma2": {"hf"}, "phi3": {"hf", "megatron"},
           "olmo2": {"hf"}}
REFUSED_AT = {("qwen2", "torchtitan"): "target.model.model_type: Qwen2's q/k/v biases",
              ("phi3", "torchtitan"): "target.model.model_type: 'phi3' (fused qkv_proj and gate_up_proj",
              **{(mt, e): f"target.model.model_type: {mt!r}" for mt in ("gemma2", "olmo2")
                 for e in ("torchtitan", "megatron")}}
# Phi-3's 2047-token sliding window has no field in the Megatron export: refused by name
# until dropped (the test's 16-token sequences never reach it)
MEGATRON_ALSO_DROP = {"phi3": "target.model.config.sliding_window"}
# Where the residual multiplier goes: the branch's output module, the norm after it in a
# post-norm block (Gemma-2, OLMo-2), where one on the attention or MLP would be normalized away.
BRANCH_OUT = {"gemma2": ("post_attention_layernorm", "post_feedforward_layernorm"),
              "olmo2": ("post_attention_layernorm", "post_feedforward_layernorm")}


@pytest.mark.slow
@pytest.mark.parametrize("family", list(FAMILIES))
def test_a_real_hf_family_goes_from_sweep_to_every_engine(family: str, tmp_path: Path, capsys, _verb,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """``sweep lr`` on a depth-2 proxy of the family, ``transfer`` to the full depth (so the
    card is CompleteP, with residual multipliers on the HF attention and MLP modules), then:
    HF, the export's own usage snippet building the model, groups and a real ``Trainer``,
    every parameter at the card's LR at every step; torchtitan, the export's model built
    under the card's μP (Llama) or refused at export naming the field (Qwen's biases);
    Megatron, its fields (Llama 3's rope scaling, Qwen's q/k/v biases), and where
    MUTRANSFER_MEGATRON_PYTHON is set, megatron-core constructing them with HF's RoPE.
    Gemma-2, Phi-3 and OLMo-2 go to HF only: torchtitan and Megatron refuse them by field."""
    import transformers

    from mutransfer.card.build import load_card
    from mutransfer.card.schema import schedule_config
    from mutransfer.training.schedules import Schedule

    config, widths = FAMILIES[family]
    mt, vocab = config["model_type"], config["vocab_size"]
    proxy = tmp_path / "proxy"
    proxy.mkdir()
    (proxy / "config.json").write_text(json.dumps(dict(config, num_hidden_layers=2, hidden_size=widths[-1])))
    lr = tmp_path / "lr"
    _run(["sweep", "lr", "--model", f"hf:{proxy}", "--widths", ",".join(map(str, widths)),
          "--lrs", "0.003,0.01,0.03", "--parametrization", "mup", "--seeds", "0", "--steps", "3",
          "--batch-size", "2", "--set", "seq_len=16", "--set", "eval_sequences=4", "--device", "cpu",
          "--workers", "1", "--max-extend", "0", "--out", str(lr), "--quiet", "--json"], capsys)
    csv = tmp_path / "lr.csv"
    assert mutransfer_cli.main(["sweep", "results", "--storage", str(lr), "--out", str(csv)]) == 0
    target = tmp_path / family
    target.mkdir()
    (target / "config.json").write_text(json.dumps(config))
    card_path = tmp_path / "card.yaml"
    # 6 steps of 4 sequences (2 x 2 accumulation) x 16 tokens.
    # The proxy trained on the byte corpus (vocab 256, recorded in its rows) and the target has 512:
    # a real vocabulary change, so --allow-vocab-change.
    assert mutransfer_cli.main([
        "transfer", "--results", str(csv), "--model", f"hf:{target}", "--tokens", "384", "--batch-size", "4",
        "--micro-batch", "2", "--target-seq-len", "16", "--warmup-tokens", "64", "--base-width", str(widths[0]),
        "--base-depth", "2", "--weight-decay", "0.1", "--allow-vocab-change", "--out", str(card_path)]) == 0
    bf16 = config["torch_dtype"] == "bfloat16"
    assert ("torch_dtype is bfloat16; the card builds float32 weights" in capsys.readouterr().err) is bf16
    card = load_card(card_path)
    assert card["parametrization"]["kind"] == "completep" and card["target"]["dtype"] == "float32"
    depth = config["num_hidden_layers"]
    residual = {h["module"]: h["scale"] for h in card["forward_multipliers"]["hooks"] if h["kind"] == "post"}
    attn_out, mlp_out = BRANCH_OUT.get(mt, ("self_attn", "mlp"))
    assert len(residual) == 2 * depth + ("model.embed_tokens" in residual)
    assert residual[f"model.layers.0.{attn_out}"] == pytest.approx(2 / depth)  # (L/L_base)^-1
    assert residual[f"model.layers.{depth - 1}.{mlp_out}"] == pytest.approx(2 / depth)

    exports = {}
    for engine, drops in (("hf", ()), ("torchtitan", ()), ("megatron", MEGATRON_DROPS)):
        out = tmp_path / f"{engine}.json"
        code = mutransfer_cli.main(["export", str(card_path), "--to", engine, *[x for d in drops for x in
                                    ("--drop", d)], "--out", str(out), "--quiet"])
        err = capsys.readouterr().err
        if engine not in ACCEPTS[mt]:  # refused at export, by field, pointing at an engine that takes it
            assert code == 2 and not out.exists()
            assert f"cannot carry card field {REFUSED_AT[mt, engine]}" in err
            assert len(err.strip().splitlines()) == 1
            advice = "hf instead; megatron refuses it too, at " if mt in MEGATRON_ALSO_DROP else " or ".join(
                sorted(ACCEPTS[mt] - {engine}, key=["hf", "megatron", "torchtitan"].index)) + " instead"
            assert f"export this card to {advice}" in err, err
            continue
        if engine == "megatron" and mt in MEGATRON_ALSO_DROP:
            field = MEGATRON_ALSO_DROP[mt]
            assert code == 2 and not out.exists() and len(err.strip().splitlines()) == 1
            assert f"cannot carry card field {field}: " in err and f"pass --drop {field}" in err, err
            code = mutransfer_cli.main(["export", str(card_path), "--to", engine,
                                        *[x for d in (*drops, field) for x in ("--drop", d)],
                                        "--out", str(out), "--quiet"])
            err = capsys.readouterr().err
        assert code == 0, err
        exports[engine] = json.loads(out.read_text())
        assert any("from mutransfer" in n or "from megatron" in n for n in exports[engine]["notes"]), engine

    # HF: the export's own snippet, then real Trainer steps.
    monkeypatch.chdir(tmp_path)
    steps = card["schedule"]["total_steps"]
    assert (steps, card["batch"]["micro_batch"], card["batch"]["grad_accum"]) == (6, 2, 2)
    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, vocab, (4 * steps, 16), generator=gen)
    data = [{"input_ids": ids, "labels": ids} for ids in tokens]
    ns: dict = {"train_dataset": data}
    torch.manual_seed(0)
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exec(exports["hf"]["usage"], ns)  # noqa: S102 - the snippet the export hands the user
    said = [str(w.message) for w in caught]
    assert any("config says dtype bfloat16; building float32 weights" in w for w in said) is bf16
    model, trainer, optimizer = ns["model"], ns["trainer"], ns["optimizer"]
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert f"post:model.layers.{depth - 1}.{attn_out}:{2 / depth:g}" in model._mutransfer_hooks
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    sched = Schedule(schedule_config(card["schedule"]))
    want = {g["name"]: g["lr"] for g in card["param_groups"]}
    assert sorted(n for g in optimizer.param_groups for n in g["names"]) == sorted(before) == sorted(want)
    seen: list[dict[str, float]] = []

    class Record(transformers.TrainerCallback):
        def on_pre_optimizer_step(self, args, state, control, **kw):  # the LR this step uses
            seen.append({n: g["lr"] for g in optimizer.param_groups for n in g["names"]})

    trainer.add_callback(Record())
    result = trainer.train()
    assert math.isfinite(result.training_loss)
    assert len(seen) == steps and sched(0) > 0
    for step, lrs in enumerate(seen):
        for name, got in lrs.items():
            assert abs(got - want[name] * sched(step)) <= 1e-12 * want[name], (step, name)
    moved = [n for n, p in model.named_parameters() if not torch.equal(p.detach(), before[n])]
    assert len(moved) == len(before)  # every parameter trained

    # torchtitan (Llama): the export's snippet builds llama3 under the card's μP.
    if "torchtitan" in exports:
        from torchtitan.models.common import ComplexRoPE
        from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

        tt: dict = {}
        exec(exports["torchtitan"]["usage"], tt)  # noqa: S102
        tmodel = tt["spec"].model.build()  # the converter checks every name and shape here
        tmodel.init_states(buffer_device=None)
        x = torch.randint(0, vocab, (2, 12))
        pos = torch.arange(12).expand_as(x)
        with torch.no_grad():
            logits = tmodel(x, positions=pos, attention_masks=tmodel.get_attention_masks(pos))
        assert logits.shape == (2, 12, vocab) and torch.isfinite(logits).all()
        hooks = {k for m in tmodel.modules() for k in m._forward_hooks}  # the residual multipliers
        assert len(hooks) >= 2 * depth
        rope = next(m for m in tmodel.modules() if isinstance(m, ComplexRoPE))
        rope_type = (config.get("rope_scaling") or {}).get("rope_type", "default")
        hf_cfg = transformers.AutoConfig.for_model(**config)
        hf_inv = (ROPE_INIT_FUNCTIONS[rope_type](hf_cfg, "cpu")[0] if rope_type != "default"
                  else model.model.rotary_emb.inv_freq)
        torch.testing.assert_close(torch.angle(rope.cache[1]), hf_inv.float(), rtol=1e-5, atol=1e-7)
        groups = tt["optimizer"].param_groups
        names = [n for n, _ in tmodel.named_parameters()]
        import re

        assert all(sum(bool(re.match(g.pattern, n)) for g in groups) == 1 for n in names)

    if "megatron" not in exports:
        return
    # Megatron: the architecture's fields, rope scaling and biases included.
    m = exports["megatron"]
    t, g = m["transformer_config"], m["gpt_model"]
    assert {d["field"] for d in m["dropped"]} == {*MEGATRON_DROPS, *([MEGATRON_ALSO_DROP[mt]] if mt in
                                                                   MEGATRON_ALSO_DROP else [])}
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    assert (t["num_layers"], t["hidden_size"], t["kv_channels"]) == (depth, config["hidden_size"], head_dim)
    assert t["num_query_groups"] == config["num_key_value_heads"]
    assert g["share_embeddings_and_output_weights"] is config["tie_word_embeddings"]
    assert t["add_qkv_bias"] is (config["model_type"] == "qwen2") and g["rotary_base"] == config["rope_theta"]
    if config.get("rope_scaling"):
        assert (g["rope_scaling"], g["rope_scaling_factor"]) == (True, 32.0)
    else:
        assert "rope_scaling" not in g
    megatron_python = os.environ.get("MUTRANSFER_MEGATRON_PYTHON")
    if megatron_python:  # megatron-core itself constructs every section, RoPE as HF's
        import subprocess

        oracle = Path(__file__).parent / "mutransfer" / "card" / "megatron_oracle.py"
        from mutransfer.card.engines.megatron_groups import megatron_name

        groups = [{**{k: grp[k] for k in ("name", "shape", "role")}, "megatron_name": megatron_name(grp["name"])}
                  for grp in card["param_groups"]]
        (tmp_path / "cases.json").write_text(json.dumps([{"export": m, "groups": groups}]))
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        run = subprocess.run([megatron_python, str(oracle), str(tmp_path / "cases.json"),
                              str(tmp_path / "built.json")], capture_output=True, text=True, timeout=300,
                             env=env, cwd=tmp_path)
        assert run.returncode == 0, run.stderr[-3000:]
        built = json.loads((tmp_path / "built.json").read_text())[0]
        for section in ("transformer_config", "optimizer_config", "scheduler_config", "training_config"):
            assert built[section] == m[section], section
        assert built["gpt_model_args_missing"] == []
        # megatron-core's own grouping gives every parameter the card's LR, CompleteP's
        # multiplier folded into the branches' output projections (LR x 2/depth)
        for grp in card["param_groups"]:
            s = 2 / depth if grp["name"].split(".")[-2] in ("o_proj", "down_proj") else 1.0
            got = built["per_param"][grp["name"]]["max_lr"]
            assert got == pytest.approx(grp["lr"] * s, rel=1e-9), grp["name"]
        assert built["rope_inv_freq"] == pytest.approx(model.model.rotary_emb.inv_freq.tolist(), rel=1e-6)
