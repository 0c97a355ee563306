"""``mutransfer audit``: correct μP setups pass, each broken variant fails naming its layer
and rule, bad entry points exit 2. Fixtures: tests/mutransfer/checks/audit_variants.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from mutransfer.checks.audit import audit
from mutransfer.entry import load_entry
from mutransfer_cli import main

ROOT = Path(__file__).resolve().parents[3]
ENTRY = "tests.mutransfer.checks.audit_variants"
WIDTHS = (32, 64)


@pytest.fixture(autouse=True)
def _at_repo_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # entry points are module paths from the repo root


def variant(name: str):
    return load_entry(f"{ENTRY}:{name}")




def _variants():
    import importlib
    import sys

    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    return importlib.import_module(ENTRY)


@pytest.mark.parametrize("name", _variants().CORRECT)
def test_correct_mup_setups_pass(name: str) -> None:
    result = audit(variant(name), widths=WIDTHS, coord_check=False, name=name)
    assert result.passed, result.report()
    rows = {(r.name, r.module): r for r in result.rows}
    if name in ("ours", "mup_mureadout"):
        # Known answers: hidden Adam LR ∝ 1/width, readout multiplier ∝ 1/width, exactly.
        assert rows[("blocks.0.attn.c_q.weight", "blocks.0.attn.c_q")].found["lr"] == pytest.approx(-1.0)
        assert rows[("lm_head.weight", "lm_head")].found["mult"] == pytest.approx(-1.0, abs=1e-6)
    if name in ("ours", "ours_constant_readout", "mup_mureadout"):
        # The readout's stored init: fan_in's m^1/2 (the default) or mup's constant; both
        # are μP, the expected exponent shown is the default's, the range both.
        head = rows[("lm_head.weight", "lm_head")]
        assert head.found["init"] == pytest.approx(0.5 if name == "ours" else 0.0, abs=0.1)
        assert head.expected["init"] == pytest.approx(0.5) and head.allowed["init"] == pytest.approx([0.0, 0.5])
        assert head.verdict == "ok"
    if name == "table3_form":
        head = rows[("lm_head.weight", "lm_head")]
        assert head.verdict == "ok (equivalent)"
        assert head.found["mult"] == pytest.approx(0.0, abs=1e-6) and head.found["lr"] == pytest.approx(-1.0)
    if name == "ours_fixed_heads":
        attn = next(r for r in result.rows if r.role == "attention")
        assert attn.axis == "d_head" and attn.found["attention"] == pytest.approx(-1.0)
    if name == "ours_muon":
        assert rows[("blocks.0.mlp.c_fc.weight", "blocks.0.mlp.c_fc")].optimizer == "muon"


@pytest.mark.parametrize("name", list(_variants().BROKEN))
def test_each_broken_variant_fails_naming_layer_and_rule(name: str) -> None:
    layer, rule, _ = _variants().BROKEN[name]
    result = audit(variant(name), widths=WIDTHS, coord_check=False, name=name)
    assert not result.passed
    first = result.first_failure
    assert first is not None and (first.name, first.broken) == (layer, rule), result.report()
    assert result.summary_line().startswith(f"first failing layer: {layer} ")


def test_broken_exponents_are_the_measured_ones() -> None:
    """The found exponents are what the variants do, not just a verdict."""
    found = {}
    for name, key, q in (("hidden_lr_not_scaled", "blocks.1.mlp.c_proj.weight", "lr"),
                         ("hf_constant_init", "blocks.1.mlp.c_proj.weight", "init"),
                         ("embedding_lr_like_hidden", "wte.weight", "lr"),
                         ("tied_scaled_twice", "wte.weight", "mult")):
        rows = audit(variant(name), widths=WIDTHS, coord_check=False, name=name).rows
        row = next(r for r in rows if r.name == key and r.module == key.rpartition(".")[0])
        found[name] = row.found[q]
    assert found["hidden_lr_not_scaled"] == pytest.approx(0.0)
    assert found["hf_constant_init"] == pytest.approx(0.0, abs=0.1)  # 0.02 at every width
    assert found["embedding_lr_like_hidden"] == pytest.approx(-1.0)
    assert found["tied_scaled_twice"] == pytest.approx(-1.0, abs=1e-6)


def test_readout_init_beyond_fan_in_fails_naming_the_range() -> None:
    """A readout init larger than fan_in's (logits growing with width) fails on its init,
    and the message gives the allowed range from constant to fan_in."""
    fail = audit(variant("readout_init_too_large"), widths=WIDTHS, coord_check=False).first_failure
    assert fail is not None and (fail.name, fail.broken) == ("lm_head.weight", "init")
    assert fail.found["init"] == pytest.approx(1.0, abs=0.1)
    assert "should be ∝ width^0 (readout_init constant) to ∝ width^0.5 (fan_in, the default)" in fail.message


def test_weight_decay_is_judged_by_its_timescale() -> None:
    """lr × wd constant in width passes, for our coupled and independent decay alike; one
    coefficient at every width fails at the first hidden matrix, naming lr·wd."""
    kw = {"widths": WIDTHS, "coord_check": False}
    assert audit(variant("ours_wd_coupled"), **kw).passed
    assert audit(variant("ours_wd_independent"), **kw).passed
    fail = audit(variant("wd_coupled"), **kw).first_failure
    assert fail is not None and fail.broken == "wd" and fail.role == "hidden"
    assert "lr·wd" in fail.message


@pytest.mark.slow
def test_coordinate_check_runs_on_the_users_model() -> None:
    ok = audit(variant("ours"), widths=(32, 64, 128), seeds=1, name="ours")
    assert ok.coord_passed is True and ok.passed
    bad = audit(variant("hidden_lr_not_scaled"), widths=(32, 64, 128), seeds=1, name="bad")
    assert bad.coord_passed is False
    assert max(bad.coord_check.max_slopes().values()) > 2 * max(ok.coord_check.max_slopes().values())


def test_cli_exit_codes_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["audit", "--widths", "32,64", "--no-coord-check"]
    assert main([*args, "--entry", f"{ENTRY}:mup_mureadout", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["passed"] is True and out["first_failure"] is None
    assert {r["role"] for r in out["rows"]} >= {"input", "hidden", "output", "vector", "attention"}
    assert main([*args, "--entry", f"{ENTRY}:readout_multiplier_missing"]) == 1
    text = capsys.readouterr().out
    assert "first failing layer: lm_head.weight (output): output forward multiplier should be" in text
    assert "FAIL: this breaks μP" in text
    assert main([*args, "--entry", f"{ENTRY}:wd_coupled"]) == 1
    assert "weight decay: decay coefficient should be" in capsys.readouterr().out


@pytest.mark.parametrize(("entry", "message"), [
    ("no_such_module_xyz:build", "entry point 'no_such_module_xyz:build' cannot be imported"),
    (f"{ENTRY}:missing", f"module '{ENTRY}' has no attribute 'missing'"),
    (f"{ENTRY}", "is not of the form module:function"),
    (f"{ENTRY}:returns_model_only", "returns_model_only(32) returned GPT, expected (model, optimizer)"),
    (f"{ENTRY}:returns_wrong_optimizer", "returned a dict as the optimizer"),
])
def test_bad_entry_points_exit_2_naming_them(entry: str, message: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit", "--entry", entry, "--widths", "32,64", "--no-coord-check"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_depth_audit_checks_completep() -> None:
    """With depths, residual-branch multipliers, in-block LRs and Adam eps are fitted
    against depth: our CompleteP passes; width-only LRs and a missing branch multiplier fail."""
    kw = {"widths": WIDTHS, "depths": (2, 4), "coord_check": False}
    ok = audit(variant("completep"), **kw)
    assert ok.passed, ok.report()
    branch = next(r for r in ok.rows if r.role == "branch")
    assert branch.found["mult"] == pytest.approx(-1.0, abs=1e-6)  # alpha = 1
    hidden = next(r for r in ok.rows if r.axis == "depth" and r.role == "hidden")
    assert hidden.found["eps"] == pytest.approx(-1.0)
    lr = audit(variant("completep_lr_not_depth_scaled"), **kw).first_failure
    assert lr is not None and (lr.name, lr.broken, lr.axis) == ("blocks.0.ln_1.weight", "lr", "depth")
    plain = audit(variant("mup_only"), **kw).first_failure
    assert plain is not None and (plain.name, plain.role, plain.broken) == ("blocks.0.attn", "branch", "mult")
    with pytest.raises(ValueError, match="depth_alpha must be one of"):
        audit(variant("completep"), depth_alpha=0.7, **kw)


def test_model_builder_with_separate_optimizer_builder_reads_mup_sgd() -> None:
    """audit(builder, optimizer_builder): mup's MuSGD sets per-group LRs that follow the
    SGD column (input and vector ∝ m, hidden ∝ 1, readout ∝ m with its 1/m multiplier)."""
    import mup

    model_only = variant("mup_mlp_model")
    result = audit(model_only, lambda m: mup.MuSGD(m.parameters(), lr=0.1), widths=WIDTHS, coord_check=False)
    assert result.passed, result.report()
    rows = {r.name: r for r in result.rows}
    assert rows["fc_in.weight"].optimizer == "sgd" and rows["fc_in.weight"].found["lr"] == pytest.approx(1.0)
    assert rows["hidden.0.weight"].found["lr"] == pytest.approx(0.0)
    # The SGD row of the table fails if the same model is trained with plain SGD.
    plain = audit(model_only, lambda m: torch.optim.SGD(m.parameters(), lr=0.1),
                  widths=WIDTHS, coord_check=False).first_failure
    assert plain is not None and (plain.name, plain.broken) == ("fc_in.weight", "lr")
