"""The card targets the user's own model (``transfer --model hf:PATH``) and the HF and
torchtitan exports are accepted in full by the real packages: HF's Trainer runs the
card's LR at every step; torchtitan's own llama3 under the export's μP converter gives
the logits of our reference (an HF Llama under ``card.apply``) for the same weights."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from mutransfer.card.apply import apply_card
from mutransfer.card.build import load_card
from mutransfer.card.engines.hf import hf_param_groups
from mutransfer.card.export import export_card
from mutransfer.card.schema import schedule_config
from mutransfer.training.schedules import Schedule
from mutransfer_cli import main

tf = pytest.importorskip("transformers", reason="the [engines] extra is not installed")

LLAMA_1B = {"model_type": "llama", "vocab_size": 128256, "hidden_size": 2048, "intermediate_size": 8192,
            "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64,
            "tie_word_embeddings": True, "max_position_embeddings": 131072, "rms_norm_eps": 1e-5}
TINY = dict(LLAMA_1B, vocab_size=128, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
            num_attention_heads=8, num_key_value_heads=4, head_dim=16, max_position_embeddings=64)
RUN = ["--lr", "0.01", "--tokens", "1280", "--batch-size", "8", "--seq-len", "16", "--target-seq-len", "16",
       "--base-depth", "2"]


def write_config(tmp_path: Path, fields: dict, name: str = "config.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(fields))
    return path


def test_llama_1b_card_holds_that_models_names_and_parametrization_values(tmp_path, capsys) -> None:
    """On meta only: every parameter of the 1B model is in exactly one group, with the
    lr, weight decay, eps and init Parametrization gives that model at base width 256."""
    from mutransfer.card.target import hf_transfer_builder, resolve_hf_target
    from mutransfer.parametrize.parametrization import Parametrization

    cfg = write_config(tmp_path, LLAMA_1B)
    out = tmp_path / "card.yaml"
    args = ["transfer", "--model", f"hf:{cfg}", "--lr", "0.01", "--tokens", "1e9", "--batch-size", "64",
            "--seq-len", "128", "--base-width", "256", "--base-depth", "16", "--weight-decay", "0.1",
            "--out", str(out)]
    assert main(args) == 2  # gpt-tiny's vocab is not Llama's 128,256
    assert "vocabulary 128256 differs from the proxy's" in capsys.readouterr().err
    assert main([*args, "--allow-vocab-change"]) == 0, capsys.readouterr().err
    card = load_card(out)
    target = card["target"]["model"]
    assert target["kind"] == "hf" and target["config"]["hidden_size"] == 2048
    assert card["target"]["vocab_change"]["target"] == 128256
    with torch.device("meta"):
        model = tf.AutoModelForCausalLM.from_config(tf.AutoConfig.for_model(**LLAMA_1B))
    names = [g["name"] for g in card["param_groups"]]
    assert sorted(names) == sorted(n for n, _ in model.named_parameters()) and len(set(names)) == len(names)
    pz = Parametrization(hf_transfer_builder(resolve_hf_target(f"hf:{cfg}")), width=2048, base_width=256)
    lr, wd = card["optimizer"]["lr"], card["optimizer"]["weight_decay"]
    for g in card["param_groups"]:
        s = pz.specs[g["name"]]
        assert g["lr"] == pytest.approx(lr * s.lr_mult, rel=1e-12), g["name"]
        # coupled decay keeps the proxy's timescale: lr_g × wd_g = lr × wd
        assert (g["init"], g["eps"]) == (s.init, 1e-8 * s.eps_mult)
        assert g["weight_decay"] == pytest.approx(wd / s.lr_mult if s.wd else 0.0, rel=1e-12), g["name"]
    assert card["param_groups"][names.index("model.layers.3.mlp.down_proj.weight")]["lr"] == pytest.approx(
        lr / 8)  # hidden: lr / m with m = 2048 / 256
    assert card["forward_multipliers"]["hooks"][0] == {"module": "lm_head", "kind": "pre", "scale": 1 / 8}


def tiny_card(tmp_path: Path, *extra: str) -> dict:
    cfg = write_config(tmp_path, TINY)
    out = tmp_path / "tiny.yaml"
    code = main(["transfer", "--model", f"hf:{cfg}", *RUN, "--base-width", "64", "--allow-vocab-change",
                 "--weight-decay", "0.1", "--out", str(out), *extra])
    assert code == 0
    return load_card(out)


def test_apply_installs_init_multipliers_groups_and_scheduler_on_the_real_hf_model(tmp_path) -> None:
    from mutransfer.card.target import build_target_model

    card = tiny_card(tmp_path, "--warmup-fraction", "0.2")
    torch.manual_seed(0)
    model = build_target_model(card)
    plain = {n: p.detach().clone() for n, p in model.named_parameters()}
    applied = apply_card(model, card)
    # init: the card's rule for each parameter, on the HF model's own init
    for g in card["param_groups"]:
        p = dict(model.named_parameters())[g["name"]]
        if g["init"].startswith("scale:"):
            torch.testing.assert_close(p, plain[g["name"]] * float(g["init"][6:]))
    # forward: the readout sees 1/m of its input, the attention 1/d_head-style scale
    x = torch.randint(0, 128, (2, 8))
    seen = {}
    model.lm_head.register_forward_pre_hook(lambda m, a: seen.setdefault("in", a[0]))
    model(x)
    assert model.model.layers[0].self_attn.scaling == card["forward_multipliers"]["attention"][
        "model.layers.0.self_attn"]
    with torch.no_grad():
        h = model.model(x).last_hidden_state
    readout = card["forward_multipliers"]["hooks"][0]
    assert readout["module"] == "lm_head"
    torch.testing.assert_close(seen["in"], h * readout["scale"])  # the readout sees h / m
    # groups and scheduler: the card's LR times its schedule at every step
    sched = Schedule(schedule_config(card["schedule"]))
    want = {g["name"]: g["lr"] for g in card["param_groups"]}
    for step in range(4):
        for grp in applied.optimizer.param_groups:
            assert grp["lr"] == pytest.approx(want[grp["names"][0]] * sched(step), rel=1e-12)
        applied.optimizer.step()
        applied.scheduler.step()
    assert card["batch"]["micro_batch"] == 8 and card["batch"]["grad_accum"] == 1


def test_hf_trainer_runs_the_cards_lr_at_every_step_with_accumulation(tmp_path) -> None:
    """A real Trainer on a tiny Llama with the exported arguments and groups: batch 8 as
    micro-batch 2 × 4 accumulation steps, the card's LR (schedule included) at each step."""
    card = tiny_card(tmp_path, "--warmup-tokens", "384", "--decay-fraction", "0.4", "--micro-batch", "2")
    assert card["batch"] == {**card["batch"], "sequences": 8, "micro_batch": 2, "grad_accum": 4}
    export = export_card(card, "hf")
    targs = export["training_arguments"]
    assert (targs["per_device_train_batch_size"], targs["gradient_accumulation_steps"]) == (2, 4)
    from mutransfer.card.target import build_target_model

    torch.manual_seed(0)
    model = build_target_model(card)
    apply_card(model, card)
    opt = torch.optim.AdamW(hf_param_groups(model, card))
    total = card["schedule"]["total_steps"]
    sched = Schedule(schedule_config(card["schedule"]))
    want = {g["name"]: g["lr"] for g in card["param_groups"]}
    seen: list[dict[str, float]] = []

    class Record(tf.TrainerCallback):
        def on_pre_optimizer_step(self, args, state, control, **kw):  # the LR this step uses
            seen.append({g["names"][0]: g["lr"] for g in opt.param_groups})

    data = [{"input_ids": torch.randint(0, 128, (16,))} for _ in range(8 * total)]
    for d in data:
        d["labels"] = d["input_ids"].clone()
    args = tf.TrainingArguments(output_dir=str(tmp_path / "hf"), report_to=[], save_strategy="no",
                                logging_strategy="no", use_cpu=True, disable_tqdm=True,
                                dataloader_num_workers=0, **targs)
    tf.Trainer(model=model, args=args, train_dataset=data, optimizers=(opt, None),
               callbacks=[Record()]).train()
    assert len(seen) == total
    assert sched(0) > 0 and sched(total - 1) == 0.0  # warmup starts above 0; the floor at the end
    for step, lrs in enumerate(seen):
        for name, lr in lrs.items():
            assert abs(lr - want[name] * sched(step)) <= 1e-12 * want[name], (step, name)


def test_export_refuses_what_an_engine_cannot_carry_unless_dropped(tmp_path, capsys) -> None:
    card = tiny_card(tmp_path, "--schedule", "constant", "--warmup-fraction", "0.2")
    with pytest.raises(ValueError, match=r"cannot carry card field schedule.kind.*--drop schedule.kind"):
        export_card(card, "hf")
    with pytest.warns(UserWarning, match="dropped card field schedule.kind"):
        out = export_card(card, "hf", drop=["schedule.kind"])
    assert out["dropped"][0]["field"] == "schedule.kind"
    with pytest.raises(ValueError, match="--drop eps: the hf export carries that field"):
        export_card(card, "hf", drop=["schedule.kind", "eps"])
    path = tmp_path / "tiny.yaml"
    h = str(tmp_path / "h.json")
    assert main(["export", str(path), "--to", "hf", "--micro-batch", "3", "--out", h]) == 2
    assert "not a multiple of dp_size 1 × micro_batch 3" in capsys.readouterr().err
    assert main(["export", str(path), "--to", "hf", "--out", str(tmp_path / "h.json")]) == 2
    assert main(["export", str(path), "--to", "hf", "--drop", "schedule.kind", "--hf-config",
                 str(tmp_path / "config.json"), "--out", str(tmp_path / "h.json")]) == 0
    assert "dropped card field schedule.kind" in capsys.readouterr().err


def test_batch_is_rounded_to_a_power_of_two_friendly_multiple(plan_kw) -> None:

    plan = plan_kw(proxy_lr=0.01, proxy_lr_interval=None, tokens=1e9, seq_len=64, batch_tokens=1194 * 64)
    assert plan.batch_sequences % 8 == 0 and abs(plan.batch_sequences - 1194) <= 4
    assert plan.micro_batch == 8 and "power-of-two default" in plan.projected["batch_split"]["rule"]
    plan = plan_kw(proxy_lr=0.01, proxy_lr_interval=None, tokens=1e9, seq_len=64, batch_tokens=1194 * 64,
                    dp_size=6, micro_batch=4)
    assert plan.batch_sequences == 1200 and plan.micro_batch == 4  # a multiple of 24
    with pytest.raises(ValueError, match="--batch-size 30 is not a multiple of --dp-size 4"):
        plan_kw(proxy_lr=0.01, proxy_lr_interval=None, tokens=1e9, seq_len=64, batch_sequences=30, dp_size=4)


# ---- torchtitan -------------------------------------------------------------------------


def test_torchtitan_llama3_under_the_export_gives_the_reference_mup_logits(tmp_path, titan_llama) -> None:
    from torchtitan.models.llama3.state_dict_adapter import Llama3StateDictAdapter

    from mutransfer.card.engines.torchtitan import torchtitan_name
    from mutransfer.card.engines.torchtitan_model import MuPConverter
    from mutransfer.card.target import build_target_model

    untied = dict(TINY, tie_word_embeddings=False)
    cfg = write_config(tmp_path, untied)
    out = tmp_path / "card.yaml"
    assert main(["transfer", "--model", f"hf:{cfg}", *RUN, "--base-width", "32", "--allow-vocab-change",
                 "--out", str(out)]) == 0
    card = load_card(out)
    export = export_card(card, "torchtitan")
    (tmp_path / "tt.json").write_text(json.dumps(export))
    torch.manual_seed(0)
    ref = build_target_model(card)
    apply_card(ref, card)
    theta = float(ref.config.rope_parameters["rope_theta"])
    tt_cfg = titan_llama(untied, theta)
    adapter = Llama3StateDictAdapter(tt_cfg, None)
    for hf_name, tt_name in adapter.from_hf_map.items():  # our renames are torchtitan's own
        if tt_name is not None:
            assert torchtitan_name(hf_name.format(3)) == tt_name.format(3)
    weights = adapter.from_hf({k: v.detach().clone() for k, v in ref.state_dict().items()})
    x = torch.randint(0, 128, (2, 12))

    def titan_logits(converters: list) -> torch.Tensor:
        c = tt_cfg
        for conv in converters:
            c = conv.build().convert(c)
        model = c.build()
        model.init_states(buffer_device=None)
        model.load_state_dict(weights)
        with torch.no_grad():
            pos = torch.arange(x.shape[1]).expand_as(x)  # one document per row
            return model(x, positions=pos, attention_masks=model.get_attention_masks(pos))

    with torch.no_grad():
        want = ref(x).logits
    got = titan_logits([MuPConverter.Config(export=str(tmp_path / "tt.json"))])
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    sp = titan_logits([])  # torchtitan's own (SP) forward on the same weights differs
    assert (sp - want).abs().max() > 1e-2
    # The converter's init: each matrix at the card's absolute std (HF's 0.02 times the
    # card's factor), not a factor on torchtitan's own init (head dim^-1/2, embedding 1).
    factor = {g["name"]: float(g["init"][6:]) if g["init"].startswith("scale:") else 1.0
              for g in card["param_groups"] if len(g["shape"]) == 2}
    want_std = {torchtitan_name(n): 0.02 * f for n, f in factor.items()}
    assert {n: export["mup"]["init"][n] for n in want_std} == {n: f"normal:{s:.6g}"
                                                                for n, s in want_std.items()}
    c = MuPConverter.Config(mup=export["mup"]).build().convert(tt_cfg)
    torch.manual_seed(1)
    m = c.build()
    m.init_states(buffer_device=None)
    got_std = {n: float(p.std()) for n, p in m.named_parameters() if n in want_std}
    assert got_std == pytest.approx(want_std, rel=0.05)
    # optimizer groups by regex over torchtitan's names cover every parameter once
    import re

    names = [n for n, _ in c.build().named_parameters()]
    hits = [sum(bool(re.match(g["pattern"], n)) for g in export["optimizer"]["param_groups"]) for n in names]
    assert hits == [1] * len(names) and math.isclose(export["lr_scheduler"]["min_lr_factor"], 0.0)


def test_a_small_batch_is_not_rounded_further_than_its_interval_allows(plan_kw) -> None:
    """5.57 sequences with its interval [4.27, 7.26]: a multiple of 4 (the power-of-two
    default) would be 4, 0.48 octave away; the coarsest unit within an eighth of an octave
    is 2, giving 6. A large batch keeps the coarse unit (1194 -> a multiple of 8)."""
    from mutransfer.card.batch_plan import ROUNDING_TOLERANCE, _split_batch

    split = _split_batch(5.57, None, 1, None, within=(4.27, 7.26))
    assert split["sequences"] == 6 and split["rounded_to"] == 2
    assert split["micro_batch"] * split["grad_accum"] == 6
    # property: whatever the projection, the rounded batch is inside a non-empty interval
    # and within the tolerance whenever some unit allows it
    for raw in [1.3, 2.9, 5.57, 11.2, 23.0, 47.5, 1194.0]:
        for dp in (1, 2, 8):
            s = _split_batch(raw, None, dp, None, within=(raw / 1.5, raw * 1.5))
            if math.floor(raw * 1.5 / dp) * dp < raw / 1.5:
                continue  # no multiple of dp inside: the flags force it out (tested elsewhere)
            assert raw / 1.5 <= s["sequences"] <= raw * 1.5 and s["sequences"] % dp == 0
            if abs(math.log(round(raw / dp) * dp / raw)) <= math.log(ROUNDING_TOLERANCE) and raw >= dp:
                assert abs(math.log(s["sequences"] / raw)) <= math.log(ROUNDING_TOLERANCE), (raw, dp)
    big = _split_batch(1194.0, None, 1, None, within=(900.0, 1500.0))
    assert big["rounded_to"] == 8 and big["sequences"] in (1192, 1200)
