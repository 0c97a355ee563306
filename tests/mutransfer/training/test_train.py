"""The trainer contract (docs/trainer_contract.md): config, result row, callback, pruning,
divergence, metrics files, gradient accumulation, bad input."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from mutransfer.training.config import TrainConfig, load_config
from mutransfer.training.data import DataConfig, TokenDataset, load_dataset
from mutransfer.training.train import train
from mutransfer.training.train_result import ROW_KEYS
from mutransfer.training.trainer import Trainer

# Tiny and single-threaded: each run is well under a second.
TINY = dict(preset="gpt-tiny", width=32, depth=1, head_dim=16, seq_len=32, batch_size=8, steps=20,
            lr=1e-2, eval_every=10, eval_sequences=16, threads=1, data_max_bytes=300_000)


@pytest.fixture(scope="module")
def data() -> TokenDataset:
    return load_dataset(DataConfig(max_bytes=300_000))


def cfg(**kw: object) -> TrainConfig:
    return TrainConfig.from_flat({**TINY, **kw})


def test_loss_falls_and_row_has_the_results_table_keys(data: TokenDataset) -> None:
    r = train(cfg(steps=40), data=data)
    assert not r.diverged and not r.pruned and r.steps_done == 40
    first = r.history[0]["loss"]
    assert first == pytest.approx(math.log(256), abs=0.6)  # muP starts near uniform
    assert r.loss < first - 1.0, (first, r.loss)
    row = r.to_row()
    assert list(row)[: len(ROW_KEYS)] == list(ROW_KEYS)
    assert row["tokens"] == 40 * 8 * 32 and row["batch_tokens"] == 256
    assert row["width"] == 32 and row["depth"] == 1 and row["n_params"] > row["n_params_nonembed"] > 0
    assert row["loss"] == r.evals[-1][1] and [s for s, _ in r.evals] == [10, 20, 30, 40]
    assert set(r.history[0]) >= {"step", "loss", "lr", "grad_norm", "tokens", "gns", "max_attn_logit",
                                 "wall_s"}


def test_callback_sees_metrics_and_can_prune(data: TokenDataset) -> None:
    seen: list[tuple[int, dict]] = []

    def cb(step: int, m: dict) -> bool:
        seen.append((step, m))
        return step >= 10

    r = train(cfg(), callback=cb, data=data)
    assert [s for s, _ in seen] == [10]
    assert set(seen[0][1]) >= {"step", "val_loss", "train_loss", "tokens"}
    assert r.pruned and not r.diverged and r.steps_done == 10 and r.to_row()["pruned"]
    assert r.loss == seen[0][1]["val_loss"]


def test_divergence_is_reported_never_raised(data: TokenDataset, tmp_path) -> None:
    r = train(cfg(parametrization="sp", lr=1e4, grad_clip=None, out_dir=str(tmp_path)), data=data)
    assert r.diverged and r.stop_reason == "diverged" and r.steps_done < 20
    assert math.isfinite(r.loss) and r.loss >= math.log(256)
    assert r.to_row()["diverged"] is True
    text = (tmp_path / "metrics.jsonl").read_text()
    assert "NaN" not in text and "Infinity" not in text
    for line in text.splitlines():
        json.loads(line)


def test_grad_accum_matches_one_big_batch_and_gives_gns(data: TokenDataset) -> None:
    a = train(cfg(steps=8, eval_every=0), data=data)
    b = train(cfg(steps=8, eval_every=0, grad_accum=4), data=data)
    la = [h["loss"] for h in a.history]
    lb = [h["loss"] for h in b.history]
    np.testing.assert_allclose(lb, la, rtol=0, atol=2e-5)
    assert all(h["gns"] is None for h in a.history)
    # McCandlish's estimator needs two batch sizes: with micro-batches there are two.
    c = train(cfg(steps=30, eval_every=0, grad_accum=2, gns_beta=0.5), data=data)
    values = [h["gns"] for h in c.history if h["gns"] is not None]
    assert values and all(math.isfinite(v) and v > 0 for v in values)


def test_metrics_files_jsonl_and_csv(data: TokenDataset, tmp_path) -> None:
    for fmt in ("jsonl", "csv"):
        out = tmp_path / fmt
        train(cfg(steps=5, eval_every=0, metrics_format=fmt, out_dir=str(out)), data=data)
        text = (out / f"metrics.{fmt}").read_text()
        lines = text.strip().splitlines()
        if fmt == "jsonl":
            assert len(lines) == 5 and json.loads(lines[-1])["step"] == 5
        else:
            assert lines[0].startswith("step,loss,lr,grad_norm,tokens,gns,max_attn_logit,wall_s")
            assert len(lines) == 6
        assert "nan" not in text.lower()
        assert not list(out.glob(".*tmp"))  # no temp files left behind


def test_overrides_parse_strings_check_types_and_reject_unknown_keys(tmp_path) -> None:
    c = TrainConfig.from_overrides(None, {"lr": "3e-3", "steps": "1e2", "qk_norm": "true",
                                          "width": "none", "grad_clip": "null", "parametrization": "muon"})
    assert c.optim.lr == 3e-3 and c.run.steps == 100 and c.model.qk_norm is True and c.model.width is None
    assert c.stabilizers.grad_clip is None and c.optim.name == "muon"  # auto re-resolved for muon
    with pytest.raises(ValueError, match="'lrr'"):
        TrainConfig.from_overrides(None, {"lrr": 1})
    with pytest.raises(ValueError, match="'steps' expects int"):
        TrainConfig.from_overrides(None, {"steps": "ten"})
    with pytest.raises(ValueError, match="'steps' expects int"):
        TrainConfig.from_overrides(None, {"steps": 2.5})
    y = tmp_path / "c.yaml"
    y.write_text("lr: 0.002\nbatch_size: 4\nspike_policy: skip\n")
    c2 = load_config(y)
    assert (c2.optim.lr, c2.run.batch_size, c2.stabilizers.spike_policy) == (0.002, 4, "skip")
    assert TrainConfig.from_yaml(y, {"seed": "3"}).run.seed == 3
    y.write_text("- not a mapping\n")
    with pytest.raises(ValueError, match="mapping"):
        load_config(y)
    y.write_text("!!python/object/apply:os.system ['true']\n")
    with pytest.raises(ValueError, match="YAML"):
        load_config(y)  # safe_load: no code runs


@pytest.mark.parametrize(("kw", "match"), [
    ({"preset": "gpt-huge"}, "unknown preset 'gpt-huge'"),
    ({"preset": "mlp-tiny"}, "not a GPT"),
    ({"lr": 0.0}, "lr must be a positive"),
    ({"lr": -1e-3}, "lr must be a positive"),
    ({"batch_size": 0}, "batch_size must be a positive integer"),
    ({"steps": -3}, "steps must be a positive integer"),
    ({"batch_size": 6, "grad_accum": 4}, "not divisible"),
    ({"width": 40}, "divisible"),
    ({"spike_policy": "panic"}, "spike_policy must be one of"),
    ({"parametrization": "mup", "optimizer": "muon"}, "does not go with"),
    ({"lr_mult_output": 0.0}, "lr_mult_output must be a positive"),
])
def test_bad_config_values_are_named(kw: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        TrainConfig.from_flat(kw)


def test_bad_data_is_named(tmp_path) -> None:
    short = TokenDataset({"train": np.arange(200, dtype=np.uint8), "val": np.arange(20, dtype=np.uint8)}, 256)
    with pytest.raises(ValueError, match="seq_len=32 is longer than the data"):
        Trainer(cfg(), data=short)
    odd = tmp_path / "tokens.bin"
    odd.write_bytes(b"\x01" * 1001)  # 1001 bytes cannot be uint16 tokens
    with pytest.raises(ValueError, match="wrong dtype"):
        train(cfg(data=str(odd), data_dtype="uint16"))


def test_devices_and_cpu_fp32() -> None:
    from mutransfer.training.device import resolve_device

    assert resolve_device("cpu") == torch.device("cpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            resolve_device("cuda")
    with pytest.raises(ValueError, match="device must be"):
        resolve_device("toaster")


def test_wsd_branches_equal_separate_runs(data: TokenDataset, tmp_path) -> None:
    from mutransfer.training.train import train_wsd_branches

    base = cfg(schedule="wsd", steps=16, warmup_steps=2, decay_fraction=0.25, eval_every=0)
    branches = train_wsd_branches(base.replace(out_dir=str(tmp_path)), [0.5, 1.0], data=data)
    assert [b.steps_done for b in branches] == [8, 16]
    # Stable-phase checkpoints at each cooldown start (8 - 2 = 6, 16 - 4 = 12).
    assert sorted(p.name for p in tmp_path.glob("wsd_stable_*.pt")) == ["wsd_stable_12.pt", "wsd_stable_6.pt"]
    for b, steps in zip(branches, (8, 16)):
        alone = train(base.replace(steps=steps), data=data)
        assert [h["loss"] for h in b.history] == [h["loss"] for h in alone.history]
        assert [h["lr"] for h in b.history] == [h["lr"] for h in alone.history]
        assert b.loss == pytest.approx(alone.loss, rel=0, abs=1e-6)
        assert b.to_row()["steps"] == steps
    # The cooldowns really decay: the short branch ends at the floor (0).
    assert branches[0].history[-1]["lr"] == 0.0 and branches[0].history[5]["lr"] == 1e-2


# ---- the CLI verb ------------------------------------------------------------------------

CLI_SETS = ["--set", "width=32", "--set", "depth=1", "--set", "head_dim=16", "--set", "seq_len=32",
            "--set", "batch_size=8", "--set", "eval_every=5", "--set", "eval_sequences=8",
            "--set", "threads=1", "--set", "data_max_bytes=300000"]


@pytest.fixture()
def cli(monkeypatch):
    import mutransfer_cli

    monkeypatch.setitem(mutransfer_cli.VERBS, "train", ("mutransfer_cli.train", "train a proxy"))
    return mutransfer_cli.main


def test_cli_trains_writes_result_and_json(cli, tmp_path, capsys) -> None:
    y = tmp_path / "c.yaml"
    y.write_text("steps: 10\nlr: 0.01\n")
    out = tmp_path / "run"
    rc = cli(["train", "--preset", "gpt-tiny", "--config", str(y), *CLI_SETS, "--out", str(out),
              "--json", "--quiet"])
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc == json.loads((out / "result.json").read_text())
    assert doc["row"]["steps_done"] == 10 and doc["row"]["width"] == 32
    assert [e[0] for e in doc["evals"]] == [5, 10]
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 10


def test_cli_wsd_branches(cli, tmp_path, capsys) -> None:
    rc = cli(["train", *CLI_SETS, "--set", "steps=8", "--set", "warmup_steps=1", "--wsd-branches", "0.5,1",
              "--json", "--quiet", "--out", str(tmp_path)])
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    assert [b["row"]["steps_done"] for b in doc["branches"]] == [4, 8]
    assert all(b["row"]["schedule"] == "wsd" for b in doc["branches"])


@pytest.mark.parametrize(("argv", "match"), [
    (["--preset", "gpt-giant"], "unknown preset 'gpt-giant'"),
    (["--set", "lrr=1"], "unknown config field 'lrr'"),
    (["--set", "lr=0"], "lr must be a positive"),
    (["--set", "optim.lr=0"], "lr must be a positive"),
    (["--set", "optim.lrr=1"], "unknown config field 'optim.lrr'"),
    (["--set", "batch_size=-4"], "batch_size must be a positive integer"),
    (["--set", "seq_len=10000000"], "seq_len=10000000 is longer than the data"),
    (["--set", "steps=many"], "'steps' expects int"),
])
def test_cli_bad_input_exits_2_and_writes_nothing(cli, tmp_path, capsys, argv, match) -> None:
    out = tmp_path / "never"
    rc = cli(["train", *argv, "--set", "data_max_bytes=300000", "--out", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and match in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_cli_corrupt_checkpoint_exits_2(cli, tmp_path, capsys) -> None:
    bad = tmp_path / "ckpt.pt"
    bad.write_bytes(b"\x00" * 64)
    rc = cli(["train", *CLI_SETS, "--resume", str(bad), "--quiet", "--out", str(tmp_path / "o")])
    assert rc == 2 and "corrupt" in capsys.readouterr().err and not (tmp_path / "o").exists()


def test_bf16_autocast_runs_with_fp32_master_weights(data: TokenDataset) -> None:
    t = Trainer(cfg(steps=3, eval_every=0, dtype="bf16"), data=data)
    r = t.run()
    assert not r.diverged and all(math.isfinite(h["loss"]) for h in r.history)
    assert all(p.dtype == torch.float32 for p in t.raw_model.parameters())
    assert set(r.history[1]) >= {"max_attn_logit", "gns", "grad_norm"}
    assert r.history[1]["max_attn_logit"] is None  # measured every 10th step only


def test_wsd_branches_of_a_diverging_trunk_all_report_divergence(data: TokenDataset) -> None:
    from mutransfer.training.train import train_wsd_branches

    bad = cfg(parametrization="sp", lr=1e4, grad_clip=None, steps=16, warmup_steps=0, eval_every=0)
    res = train_wsd_branches(bad, [0.5, 1.0], data=data)
    assert [r.diverged for r in res] == [True, True] and all(math.isfinite(r.loss) for r in res)


@pytest.mark.parametrize("wd_mode", ["coupled", "independent"])
def test_role_lr_mults_scale_only_their_role_and_keep_the_per_step_decay(data: TokenDataset,
                                                                         wd_mode: str) -> None:
    kw = dict(steps=2, eval_every=0, weight_decay=0.1, wd_mode=wd_mode, base_width=16)
    plain = Trainer(cfg(**kw), data=data)
    tuned = Trainer(cfg(**kw, lr_mult_input=4.0, lr_mult_output=0.5, lr_mult_vector=2.0), data=data)
    want = {"input": 4.0, "output": 0.5, "vector": 2.0, "hidden": 1.0}
    a = {g["role"]: g for g in plain.opt.param_groups}
    b = {g["role"]: g for g in tuned.opt.param_groups}
    assert set(a) == set(b) == set(want)
    for role, m in want.items():
        assert b[role]["lr"] == pytest.approx(m * a[role]["lr"]), role
        assert b[role]["lr_mult"] == pytest.approx(m * a[role]["lr_mult"]), role
        # torch AdamW decays by lr x weight_decay per step: independent decay must not move.
        decay_a, decay_b = a[role]["lr"] * a[role]["weight_decay"], b[role]["lr"] * b[role]["weight_decay"]
        if wd_mode == "independent":
            assert decay_b == pytest.approx(decay_a), role
        else:
            assert b[role]["weight_decay"] == a[role]["weight_decay"], role
    # The schedule composes with the multiplier: after a step the ratio is unchanged.
    plain.train_step()
    tuned.train_step()
    a = {g["role"]: g for g in plain.opt.param_groups}
    b = {g["role"]: g for g in tuned.opt.param_groups}
    assert b["output"]["lr"] == pytest.approx(0.5 * a["output"]["lr"])
    plain.close()
    tuned.close()


def test_one_builder_gives_the_trainers_the_cards_and_the_exporters_groups(data: TokenDataset,
                                                                          monkeypatch) -> None:
    """Parametrization.optimizer_settings is the only place that computes per-parameter lr,
    lr_mult, weight decay and eps: change it (every LR × 3, every weight decay × 5, every eps
    × 7) and the trainer's optimizer, the card and an engine export (HF's groups, read from
    the card) all move by exactly that, and nothing else recomputes them."""
    from mutransfer.card.build import build_card
    from mutransfer.card.engines.hf import hf_param_groups
    from mutransfer.parametrize.parametrization import Parametrization

    c = cfg(steps=2, eval_every=0, weight_decay=0.1, lr_mult_output=0.5, base_width=16)
    Numbers = dict[str, tuple[float, float, float]]

    def groups_card_export() -> tuple[Numbers, Numbers, Numbers]:
        t = Trainer(c, data=data)
        opt = c.optim
        card = build_card(t.pz, lr=opt.lr,
                          optimizer={"weight_decay": opt.weight_decay, "wd_mode": opt.wd_mode,
                                     "eps": opt.eps},
                          schedule={"kind": "constant"}, batch={"sequences": 8}, target={"width": 32},
                          role_lr_mults=c.parametrization.lr_mults)
        hf = hf_param_groups(t.raw_model, card)
        t.close()
        return ({n: (g["lr"], g["weight_decay"], g["eps"]) for g in t.opt.param_groups for n in g["names"]},
                {g["name"]: (g["lr"], g["weight_decay"], g["eps"]) for g in card["param_groups"]},
                {n: (g["lr"], g["weight_decay"], g["eps"]) for g in hf for n in g["names"]})

    plain_t, plain_c, plain_x = groups_card_export()
    assert plain_t.keys() == plain_c.keys() == plain_x.keys()
    for name, want in plain_t.items():  # same numbers at the proxy's own shape
        assert plain_c[name] == pytest.approx(want, rel=1e-12), name
        assert plain_x[name] == pytest.approx(want, rel=1e-12), name
    original = Parametrization.optimizer_settings

    def patched(self, *a, **kw):
        out = original(self, *a, **kw)
        return {n: {**v, "lr": 3 * v["lr"], "lr_mult": 3 * v["lr_mult"],
                    "weight_decay": 5 * v["weight_decay"], "eps": 7 * v["eps"]} for n, v in out.items()}

    monkeypatch.setattr(Parametrization, "optimizer_settings", patched)
    for got in groups_card_export():
        assert got.keys() == plain_t.keys()
        for name, (lr, wd, eps) in got.items():
            assert lr == pytest.approx(3 * plain_t[name][0], rel=1e-12), name
            assert wd == pytest.approx(5 * plain_t[name][1], rel=1e-12), name
            assert eps == pytest.approx(7 * plain_t[name][2], rel=1e-12), name
    assert len({wd for _, wd, _ in plain_t.values()}) >= 3  # 0, λ and hidden's λ × 2 (base width 16)
    assert len({lr for lr, _, _ in plain_t.values()}) >= 2  # the patch is seen per group, not globally
