"""mutransfer.models.source: one way to name a model (preset, local HF config.json, builder),
the HF proxy config at a width/depth against the real transformers models, and the
refusals (hub ids, unknown model types, widths a config cannot represent, bad builders)."""

from __future__ import annotations

import json
import math
import socket
import sys
import textwrap
from pathlib import Path

import pytest
import torch

tf = pytest.importorskip("transformers", reason="the [engines] extra (transformers) is not installed")

from mutransfer.models.builder import logits_of  # noqa: E402
from mutransfer.models.source import (  # noqa: E402
    ModelSource,
    build_model,
    hf_proxy_config,
    load_hf_config,
    parse_model,
)

LLAMA = dict(model_type="llama", hidden_size=64, intermediate_size=160, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=256,
             max_position_embeddings=64, tie_word_embeddings=False)


def write_config(tmp_path: Path, name: str = "cfg", **fields: object) -> Path:
    d = tmp_path / name
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(json.dumps(fields))
    return d


BUILDERS = textwrap.dedent('''
    import torch.nn as nn

    class Tiny(nn.Module):
        def __init__(self, width, depth, vocab=256):
            super().__init__()
            self.emb = nn.Embedding(vocab, width)
            self.blocks = nn.Sequential(*[nn.Linear(width, width) for _ in range(depth)])
            self.head = nn.Linear(width, vocab, bias=False)

        def forward(self, x):
            return self.head(self.blocks(self.emb(x)))

    def build(width, depth):
        return Tiny(width, depth)

    def boom(width, depth):
        raise RuntimeError("no such width")

    class NoLogits(Tiny):
        def forward(self, x):
            return {"hidden": self.emb(x)}

    def no_logits(width, depth):
        return NoLogits(width, depth)

    def not_a_module(width, depth):
        return 3
''')


@pytest.fixture
def builders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "user_builders.py").write_text(BUILDERS)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "user_builders"
    sys.modules.pop("user_builders", None)


def test_parse_each_kind(tmp_path: Path, builders: str) -> None:
    assert parse_model("gpt-small") == parse_model("preset:gpt-small") == ModelSource("preset", "gpt-small")
    assert parse_model("gpt-small").model_id == "gpt-small"
    d = write_config(tmp_path, **LLAMA)
    src = parse_model(f"hf:{d}")
    assert src == parse_model(f"hf:{d / 'config.json'}") and src.kind == "hf"
    raw = (d / "config.json").read_bytes()
    import hashlib

    assert src.model_id == f"hf:llama@{hashlib.sha256(raw).hexdigest()[:8]}" == src.describe()
    assert parse_model(f"hf:{d}", head_rule="keep_heads").model_id.endswith("/keep_heads")
    assert parse_model(src.spec()) == src
    b = parse_model(f"{builders}:build")
    assert b.kind == "builder" and b.model_id == f"builder:{builders}:build"


@pytest.mark.parametrize("text, match", [
    ("gpt-huge", "unknown model 'gpt-huge'"),
    ("hf:meta-llama/Llama-3.2-1B", "hf:meta-llama/Llama-3.2-1B.*never downloads.*local config.json"),
    ("hf:", "names no path"),
    ("no_such_module_xyz:build", "no_such_module_xyz:build.*cannot be imported"),
])
def test_bad_names_are_refused(text: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        parse_model(text)


def test_unknown_model_type_and_builder_attribute(tmp_path: Path, builders: str) -> None:
    d = write_config(tmp_path, **{**LLAMA, "model_type": "llamazing"})
    with pytest.raises(ValueError, match="unknown model_type 'llamazing'"):
        parse_model(f"hf:{d}")
    with pytest.raises(ValueError, match=f"{builders}:nope"):
        parse_model(f"{builders}:nope")


def test_no_network_is_touched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Parsing, loading and building an HF model with every socket connect failing: it
    never needs the network (a hub lookup would raise here)."""
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"network access attempted: {args}")

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    d = write_config(tmp_path, **LLAMA)
    src = parse_model(f"hf:{d}")
    model = build_model(src, 32, 1, vocab_size=256)
    logits = logits_of(model(torch.zeros(1, 3, dtype=torch.long)))
    assert logits.shape == (1, 3, 256)
    with pytest.raises(ValueError, match="never downloads"):
        parse_model("hf:Qwen/Qwen2-0.5B")


def test_llama_proxy_keeps_head_dim_and_gqa_ratio(tmp_path: Path) -> None:
    cfg = load_hf_config(write_config(tmp_path, **LLAMA))
    assert isinstance(cfg, tf.LlamaConfig)
    p = hf_proxy_config(cfg, 128, 3)
    assert (p.hidden_size, p.intermediate_size, p.num_hidden_layers) == (128, 320, 3)
    assert (p.num_attention_heads, p.num_key_value_heads, p.head_dim) == (8, 4, 16)
    assert (p.vocab_size, p.max_position_embeddings) == (256, 64)
    assert cfg.hidden_size == 64  # the user's config is not changed
    q = hf_proxy_config(cfg, 128, 2, head_rule="keep_heads")
    assert (q.num_attention_heads, q.num_key_value_heads, q.head_dim) == (4, 2, 32)
    # The real model agrees: q_proj maps hidden -> heads × head_dim, k_proj to kv × head_dim.
    m = tf.AutoModelForCausalLM.from_config(p)
    attn = m.model.layers[0].self_attn
    assert attn.q_proj.weight.shape == (128, 128) and attn.k_proj.weight.shape == (64, 128)
    assert m.model.layers[0].mlp.up_proj.weight.shape == (320, 128) and len(m.model.layers) == 3


@pytest.mark.parametrize("width, field", [
    (48, "num_key_value_heads"),  # 3 heads, 1.5 kv heads
    (40, "intermediate_size"),  # 160 × 40 / 64 = 100 ok; heads 2.5
    (36, "intermediate_size"),  # 160 × 36 / 64 = 90; heads 2.25
    (8, "num_key_value_heads"),  # kv 0.25
])
def test_unrepresentable_width_names_the_field(tmp_path: Path, width: int, field: str) -> None:
    cfg = load_hf_config(write_config(tmp_path, **LLAMA))
    fields = {"num_key_value_heads", "num_attention_heads", "intermediate_size"}
    with pytest.raises(ValueError, match="|".join(fields)) as info:
        hf_proxy_config(cfg, width, 2)
    assert f"width {width}" in str(info.value)


def test_family_field_tables(tmp_path: Path) -> None:
    gpt2 = load_hf_config(write_config(tmp_path, "g", model_type="gpt2", n_embd=64, n_layer=2, n_head=4,
                                       n_inner=256, vocab_size=256, n_positions=64))
    p = hf_proxy_config(gpt2, 128, 3)
    assert (p.n_embd, p.n_layer, p.n_head, p.n_inner, p.n_positions) == (128, 3, 8, 512, 64)
    k = hf_proxy_config(gpt2, 128, 3, head_rule="keep_heads")
    assert k.n_head == 4 and k.n_embd // k.n_head == 32
    neox = load_hf_config(write_config(tmp_path, "n", model_type="gpt_neox", hidden_size=64,
                                       num_hidden_layers=2, num_attention_heads=4,
                                       intermediate_size=256, vocab_size=256, max_position_embeddings=64))
    p = hf_proxy_config(neox, 96, 1)
    assert (p.hidden_size, p.num_attention_heads, p.intermediate_size, p.num_hidden_layers) == (96, 6, 384, 1)
    for mt in ("qwen2", "mistral", "gemma", "gemma2", "phi3", "olmo2", "mixtral"):
        cfg = load_hf_config(write_config(tmp_path, mt, **{**LLAMA, "model_type": mt}))
        p = hf_proxy_config(cfg, 128, 4)
        assert (p.hidden_size, p.num_attention_heads, p.num_key_value_heads, p.intermediate_size,
                p.num_hidden_layers) == (128, 8, 4, 320, 4), mt
        types = getattr(p, "layer_types", None)
        assert types is None or len(types) == 4, mt
        m = build_model(parse_model(f"hf:{tmp_path / mt}"), 32, 1, vocab_size=256)  # builds at a new width
        assert logits_of(m(torch.zeros(1, 2, dtype=torch.long))).shape == (1, 2, 256), mt


def test_builders_and_their_failures(builders: str) -> None:
    m = build_model(parse_model(f"{builders}:build"), 32, 3, vocab_size=256)
    assert len(m.blocks) == 3 and m.emb.weight.shape == (256, 32)
    for fn, match in (("boom", "raised RuntimeError"), ("no_logits", "returned dict, not logits"),
                      ("not_a_module", "returned int, not an nn.Module")):
        with pytest.raises(ValueError, match=f"{builders}:{fn}.*{match}|{match}.*{builders}:{fn}"):
            build_model(parse_model(f"{builders}:{fn}"), 32, 2, vocab_size=256)


def test_preset_builds_and_logits_of() -> None:
    m = build_model(parse_model("gpt-tiny"), 32, 1, vocab_size=256)
    assert m.cfg.width == 32 and m.cfg.depth == 1
    assert logits_of(m(torch.zeros(1, 2, dtype=torch.long))).shape == (1, 2, 256)
    with pytest.raises(ValueError, match="'mine' returned str"):
        logits_of("x", "'mine'")


# ---- the trainer on a source model ----------------------------------------------------------


@pytest.fixture(scope="module")
def data():  # type: ignore[no-untyped-def]
    from mutransfer.training.data import DataConfig, load_dataset

    return load_dataset(DataConfig(max_bytes=300_000))


def _cfg(src: str, **kw: object):  # type: ignore[no-untyped-def]
    from mutransfer.training.config import TrainConfig

    base = dict(source=src, width=32, seq_len=32, batch_size=8, steps=12, lr=1e-2, eval_every=6,
                eval_sequences=8, threads=1, grad_accum=2)
    return TrainConfig.from_flat({**base, **kw})


def test_trainer_resume_and_wsd_branch_are_bit_identical_on_hf_llama(tmp_path: Path, data) -> None:
    from mutransfer.training.train import train, train_wsd_branches

    src = f"hf:{write_config(tmp_path, **LLAMA)}"
    full = train(_cfg(src), data=data)
    assert full.arch.startswith("hf:llama@") and full.to_row()["arch"] == full.arch
    assert (full.width, full.depth) == (32, 2) and full.gns is not None and math.isfinite(full.loss)
    assert full.loss < math.log(256)  # it learned something in 12 steps
    out = tmp_path / "run"
    first = train(_cfg(src, out_dir=str(out), checkpoint_every=6), callback=lambda step, m: step >= 6,
                  data=data)
    assert first.steps_done == 6 and (out / "checkpoint.pt").is_file()
    resumed = train(_cfg(src, resume=str(out / "checkpoint.pt")), data=data)
    assert [h["loss"] for h in resumed.history] == [h["loss"] for h in full.history]  # exact
    assert [h["gns"] for h in resumed.history] == [h["gns"] for h in full.history]
    assert resumed.loss == full.loss and resumed.evals == full.evals
    # WSD: the branch at fraction 1 repeats the separate WSD run of 12 steps
    wsd = train(_cfg(src, schedule="wsd", warmup_steps=1), data=data)
    branches = train_wsd_branches(_cfg(src, schedule="wsd", warmup_steps=1), [0.5, 1.0], data=data)
    assert [h["loss"] for h in branches[1].history] == [h["loss"] for h in wsd.history]


def test_z_loss_and_softcap_apply_to_logits(tmp_path: Path, data) -> None:
    """Known answer at step 1 (same init and batch): the loss with z-loss is CE + coef ·
    mean(logsumexp²) of the same logits, and a soft cap changes the loss."""
    from mutransfer.training.trainer import Trainer

    src = f"hf:{write_config(tmp_path, **LLAMA)}"
    t = Trainer(_cfg(src, steps=1, grad_accum=1), data=data)
    x, y = data.get_batch("train", 0, 8, 32, 0)
    logits = logits_of(t.raw_model(x)).float()
    ce = torch.nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten())
    lse2 = torch.logsumexp(logits, -1).pow(2).mean()
    tz = Trainer(_cfg(src, steps=1, grad_accum=1, z_loss=1e-2), data=data)
    assert float(tz._loss(x, y)) == pytest.approx(float(ce + 1e-2 * lse2), rel=1e-6)
    tc = Trainer(_cfg(src, steps=1, grad_accum=1, logit_softcap=0.5), data=data)
    capped = 0.5 * torch.tanh(logits / 0.5)
    want = torch.nn.functional.cross_entropy(capped.flatten(0, 1), y.flatten())
    assert float(tc._loss(x, y)) == pytest.approx(float(want), rel=1e-6)


@pytest.mark.parametrize("field, value, why", [
    ("qk_norm", True, "our attention module"),
    ("head_dim", 8, "head_rule"),
    ("tie_embeddings", True, "tie_word_embeddings"),
    ("freeze_norm_gains", True, "RMSNorm"),
    ("qk_clip", True, "QK-clip"),
])
def test_stabilizers_that_cannot_apply_are_refused(tmp_path: Path, field: str, value: object,
                                                   why: str) -> None:
    src = f"hf:{write_config(tmp_path, **LLAMA)}"
    with pytest.raises(ValueError, match=f"{field}.*{why}|{why}.*{field}") as info:
        _cfg(src, **{field: value})
    assert str(write_config(tmp_path, **LLAMA)) in str(info.value)


def test_fused_training_refuses_a_source_model(tmp_path: Path) -> None:
    from mutransfer.training.fusion import check_fusible, partition, unsupported_reason

    cfg = _cfg(f"hf:{write_config(tmp_path, **LLAMA)}", grad_accum=1)
    assert "our own GPT" in unsupported_reason(cfg)
    with pytest.raises(ValueError, match="cannot be fused: model .* not a built-in preset"):
        check_fusible([cfg, cfg.replace(lr=1e-3)])
    assert partition([cfg, cfg.replace(lr=1e-3)], k=2) == [[0], [1]]  # each alone, unfused


def test_config_source_and_base_sizes(tmp_path: Path, builders: str) -> None:
    from mutransfer.training.trainer import base_sizes

    d = write_config(tmp_path, **LLAMA)
    cfg = _cfg(str(d).join(["hf:", ""]), width=128)
    assert cfg.model.source == f"hf:{(d / 'config.json').resolve()}"  # absolute, as rows store it
    assert cfg.model.shape() == (128, 2, 32)
    assert base_sizes(cfg, cfg.model.shape()) == (64, 2)  # the config's own width: the base
    assert base_sizes(_cfg(f"hf:{d}", width=32), _cfg(f"hf:{d}", width=32).model.shape()) == (32, 2)
    b = _cfg(f"{builders}:build", width=None, seq_len=None)
    assert b.model.shape() == (64, 2, 64)  # a builder's defaults: the preset's (gpt-tiny)
    assert _cfg("gpt-small", width=None).model.source is None  # a preset name is the preset
    with pytest.raises(ValueError, match="num_key_value_heads"):
        _cfg(f"hf:{d}", width=48)


def test_a_train_run_reads_its_hf_config_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 2-step ``train --model hf:DIR`` run, in process: config.json is opened once and
    parsed once (before the model was kept as text: 19 reads, 6 parse_model and 9
    load_hf_config calls), and the parsed source is what the config hands out."""
    import builtins
    import io

    import mutransfer.models.source as source_mod
    import mutransfer_cli

    d = write_config(tmp_path, **LLAMA)
    reads: list[str] = []
    real = {"open": builtins.open, "io_open": io.open}

    def counted(name: str, fn):  # type: ignore[no-untyped-def]
        def wrapper(first, *a, **k):  # type: ignore[no-untyped-def]
            if str(first).endswith("config.json") and str(tmp_path) in str(Path(str(first)).resolve()):
                reads.append(name)
            return fn(first, *a, **k)
        return wrapper

    monkeypatch.setattr(builtins, "open", counted("open", real["open"]))
    monkeypatch.setattr(io, "open", counted("io.open", real["io_open"]))  # Path.read_* open through it
    parses: list[Path] = []
    real_parse = source_mod._parse_config_json
    monkeypatch.setattr(source_mod, "_parse_config_json",
                        lambda path, raw: parses.append(path) or real_parse(path, raw))
    out = tmp_path / "run"
    assert mutransfer_cli.main(["train", "--model", f"hf:{d}", "--set", "width=32", "--set", "steps=2",
                                "--set", "batch_size=2", "--set", "seq_len=16", "--out", str(out),
                                "--quiet"]) == 0
    assert len(reads) == 1, reads
    assert parses == [(d / "config.json").resolve()]
    row = json.loads((out / "result.json").read_text())["row"]
    assert row["steps_done"] == 2 and row["arch"].startswith("hf:llama@")


def test_an_edited_hf_config_is_read_again(tmp_path: Path) -> None:
    """parse_model keeps one source per file, keyed on its mtime and size: an edit is seen."""
    d = write_config(tmp_path, **LLAMA)
    a = parse_model(f"hf:{d}")
    assert parse_model(f"hf:{d / 'config.json'}") is a  # the same file: the same parsed source
    assert a.hf_config().hidden_size == 64
    a.hf_config().hidden_size = 1  # each call hands out its own copy
    assert a.hf_config().hidden_size == 64
    write_config(tmp_path, **{**LLAMA, "hidden_size": 128, "intermediate_size": 320, "head_dim": 32})
    b = parse_model(f"hf:{d}")
    assert b is not a and b.hf_config().hidden_size == 128 and b.model_id != a.model_id


def test_a_gqa_width_refusal_names_the_other_head_rule() -> None:
    """Llama-3.2-1B's heads (32 query, 8 KV at width 2048): width 128 would need half a KV
    head under keep_head_dim; the refusal says keep_heads takes it, and keep_heads does."""
    transformers = pytest.importorskip("transformers")
    from mutransfer.models.source import hf_proxy_config

    cfg = transformers.LlamaConfig(hidden_size=2048, intermediate_size=8192, num_attention_heads=32,
                                   num_key_value_heads=8, head_dim=64, num_hidden_layers=2, vocab_size=128)
    with pytest.raises(ValueError, match=r"num_key_value_heads = 8 × 128 / 2048 = 0.5 is not a positive "
                                         r"integer.*; --head-rule keep_heads keeps every head"):
        hf_proxy_config(cfg, 128, 2)
    small = hf_proxy_config(cfg, 128, 2, head_rule="keep_heads")
    assert (small.num_attention_heads, small.num_key_value_heads, small.head_dim) == (32, 8, 4)


def test_gemmas_query_scalar_follows_a_scaled_head_dim(tmp_path: Path) -> None:
    """Gemma-2 divides attention logits by sqrt(query_pre_attn_scalar), released equal to
    head_dim: a keep_heads proxy scales it with the head dim, so the proxy's attention scale
    is 1/sqrt(its own head dim) as in the released model (a keep_head_dim proxy keeps both)."""
    from mutransfer.models.hf_families import RELEASED

    released = dict(RELEASED["gemma-2-2b"])
    cfg = load_hf_config(write_config(tmp_path, **released))
    q = hf_proxy_config(cfg, 576, 2, head_rule="keep_heads")
    assert (q.head_dim, q.query_pre_attn_scalar, q.num_attention_heads) == (64, 64, 8)
    attn = tf.AutoModelForCausalLM.from_config(q, dtype=torch.float32).model.layers[0].self_attn
    assert attn.scaling == pytest.approx(64**-0.5)
    k = hf_proxy_config(cfg, 1152, 2)
    assert (k.head_dim, k.query_pre_attn_scalar, k.num_attention_heads) == (256, 256, 4)
    odd = load_hf_config(write_config(tmp_path, "27b", **{**released, "query_pre_attn_scalar": 288}))
    assert hf_proxy_config(odd, 576, 2, head_rule="keep_heads").query_pre_attn_scalar == 72  # 9/8 of 64 kept
