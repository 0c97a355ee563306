"""The README's export commands, run as written on a card shaped like the demo's own
(llama-small proxy at width 32 and its depth, a 24-block target of width 512: CompleteP with
a ×1/12 residual multiplier): each exits 0 and the Megatron one carries the multiplier."""

from __future__ import annotations

import fnmatch
import json
from pathlib import Path

import pytest

from mutransfer.card.build import save_card
from mutransfer.card.engines.megatron_groups import megatron_name
from mutransfer.card.make import TransferRequest, make_card
from mutransfer.card.request import RunChoices
from mutransfer_cli import main


@pytest.fixture(scope="module")
def demo_card(tmp_path_factory) -> Path:
    made = make_card(TransferRequest(lr=0.01, preset="llama-small", parametrization="mup", base_width=32,
                                     proxy_batch_tokens=2048, proxy_tokens=2e6,
                                     overrides={"width": 512, "depth": 24, "seq_len": 1024},
                                     tokens_per_param=20.0, run=RunChoices(batch_sequences=8)))
    folder = tmp_path_factory.mktemp("demo")
    save_card(made, folder / "card.yaml")
    return folder


def test_the_readme_exports_run_on_the_demos_card(demo_card: Path, monkeypatch, capsys,
                                                   readme_commands) -> None:
    commands = [c for c in readme_commands("## Export to HF") if c[:1] == ["export"]]
    assert {c[c.index("--to") + 1] for c in commands} == {"hf", "torchtitan", "megatron"}
    monkeypatch.chdir(demo_card)
    for argv in commands:
        assert main(argv) == 0, (argv, capsys.readouterr().err[-2000:])
        assert (demo_card / argv[argv.index("--out") + 1]).exists()
    import yaml

    card = yaml.safe_load((demo_card / "card.yaml").read_text())
    pz = card["parametrization"]
    assert (pz["kind"], pz["depth"], pz["base_depth"]) == ("completep", 24, 2)
    meg = yaml.safe_load((demo_card / "megatron.yaml").read_text())
    assert [d["field"] for d in meg["dropped"]] == ["init"]
    # the branch multiplier 1/12 is folded: the output projections learn at the card's LR / 12
    proj = next(g for g in card["param_groups"] if g["name"].endswith("attn.c_proj.weight"))
    entry = next(o for o in meg["config_overrides"]
                 if fnmatch.fnmatch(megatron_name(proj["name"]), o["name"]))
    assert entry["override"]["max_lr"] == pytest.approx(proj["lr"] / 12, rel=1e-12)
    assert any(n.startswith("residual multiplier folded (CompleteP's x0.0833333") for n in meg["notes"])
    # the embedding keeps its own weight decay, not the hidden matrices'
    emb = next(g for g in card["param_groups"] if g["role"] == "input")
    wte = next(o for o in meg["config_overrides"] if o["name"] == "embedding.word_embeddings.weight")
    wd = meg["optimizer_config"]["weight_decay"] * wte["override"].get("wd_mult", 1.0)
    assert wd == pytest.approx(emb["weight_decay"], rel=1e-12)
    titan = json.loads((demo_card / "torchtitan.json").read_text())
    branch = {h["scale"] for h in titan["mup"]["hooks"] if h["kind"] == "post" and ".mlp" in h["module"]}
    assert branch == {1 / 12}


def test_every_engines_weight_decay_is_shown_with_its_per_step_decay(demo_card: Path, monkeypatch) -> None:
    """HF's TrainingArguments λ and Megatron's weight_decay look absurd beside their LRs; each
    export's notes give η·λ per group, the same 4e-5 per step for every matrix of the demo's card."""
    import yaml

    monkeypatch.chdir(demo_card)
    card = yaml.safe_load((demo_card / "card.yaml").read_text())
    want = {round(g["lr"] * g["weight_decay"], 12) for g in card["param_groups"] if g["weight_decay"]}
    assert len(want) == 1  # μP and CompleteP keep η·λ across groups
    per_step = next(iter(want))
    for engine, out in (("hf", "hf.json"), ("torchtitan", "torchtitan.json"), ("megatron", "megatron.yaml")):
        (demo_card / out).unlink(missing_ok=True)
        assert main(["export", "card.yaml", "--to", engine, "--out", out, "--quiet",
                     *(["--drop", "init"] if engine == "megatron" else [])]) == 0
        export = yaml.safe_load((demo_card / out).read_text())
        note = next(n for n in export["notes"] if n.startswith("weight decay:"))
        assert f"η·λ {per_step:.3g} per step" in note, (engine, note)
        assert "η·λ 0 per step" in note  # the vectors
