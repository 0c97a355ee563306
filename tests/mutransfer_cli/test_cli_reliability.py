"""Output paths, earlier runs' folders, bounded size flags and unreadable results files:
each is one line on stderr and exit 2, checked before any work, with nothing written."""

from __future__ import annotations

import os
import sys

import pytest

import mutransfer_cli


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    rc = mutransfer_cli.main(argv)
    return rc, capsys.readouterr().err


def one_line(err: str) -> bool:
    return len(err.strip().splitlines()) == 1


@pytest.fixture()
def results(tmp_path):
    path = tmp_path / "results.csv"
    rows = ["lr,loss,width"] + [f"{lr},{1 + (i - 2) ** 2 / 10},64" for i, lr in
                                enumerate([1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2])]
    path.write_text("\n".join(rows) + "\n")
    return path


# ---- 4. output paths ----------------------------------------------------------------------

@pytest.mark.parametrize("verb", [
    ["fit", "optimum", "{r}", "--n-boot", "5"],
    ["transfer", "--results", "{r}", "--target-width", "256", "--tokens", "1e6", "--preset", "gpt-tiny"],
])
def test_out_never_overwrites_its_own_input(verb, results, capsys) -> None:
    before = results.read_bytes()
    argv = [a.format(r=results) for a in verb]
    for out in (results, results.parent / "." / results.name):
        rc, err = run([*argv, "--out", str(out)], capsys)
        assert rc == 2 and "refusing to overwrite" in err and one_line(err)
    assert results.read_bytes() == before


def test_unwritable_outputs_exit_2_before_the_fit(results, tmp_path, capsys) -> None:
    fit = ["fit", "optimum", str(results), "--n-boot", "5", "--out"]
    (tmp_path / "adir").mkdir()
    for out, needle in [(tmp_path / "adir", "is a directory"),
                        (results / "fit.json", "is a file"),
                        (tmp_path / "a" / "b" / "fit.json", None)]:
        rc, err = run([*fit, str(out)], capsys)
        if needle is None:  # missing folders are made
            assert rc == 0 and out.is_file()
        else:
            assert rc == 2 and needle in err and one_line(err)


@pytest.mark.skipif(os.geteuid() == 0 if hasattr(os, "geteuid") else True,
                    reason="root may write anywhere")
def test_permission_denied_is_one_line(results, tmp_path, capsys) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    rc, err = run(["fit", "optimum", str(results), "--out", str(ro / "f.json")], capsys)
    assert rc == 2 and "permission denied" in err and one_line(err)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")
def test_an_oserror_while_writing_is_one_line_not_a_traceback(capsys) -> None:
    rc, err = run(["memory", "--params", "1e6", "--out", "/proc/no/such/dir/m.json"], capsys)
    assert rc == 2 and one_line(err) and "Traceback" not in err


# ---- 6. --out into an earlier run's folder -----------------------------------------------------

TRAIN = ["train", "--set", "width=32", "--set", "depth=1", "--set", "head_dim=16", "--set", "seq_len=32",
         "--set", "batch_size=4", "--set", "steps=2", "--set", "eval_every=2", "--set", "eval_sequences=8",
         "--set", "threads=1", "--set", "data_max_bytes=300000", "--quiet"]


def test_train_refuses_an_earlier_runs_folder_without_overwrite(tmp_path, capsys) -> None:
    out = tmp_path / "run"
    assert run([*TRAIN, "--out", str(out)], capsys)[0] == 0
    first = (out / "result.json").read_bytes()
    rc, err = run([*TRAIN, "--set", "lr=0.02", "--out", str(out)], capsys)
    assert rc == 2 and "already holds an earlier run" in err and "--overwrite" in err and one_line(err)
    assert (out / "result.json").read_bytes() == first
    assert run([*TRAIN, "--set", "lr=0.02", "--out", str(out), "--overwrite"], capsys)[0] == 0
    assert (out / "result.json").read_bytes() != first


# ---- 6. bounded flags ------------------------------------------------------------------------

@pytest.mark.parametrize(("argv", "needle"), [
    (["explain", "--width", "100000000"], "above the limit"),
    (["explain", "--width", "65536"], "above explain's limit"),
    (["transfer", "--lr", "0.01", "--target-width", "256", "--target-depth", "10000000",
      "--tokens", "1e6", "--out", "{tmp}/c.yaml"], "above the limit 10,000"),
    (["fit", "optimum", "{r}", "--n-boot", "100000000", "--json"], "above the limit 100,000"),
])
def test_size_flags_are_bounded(argv, needle, results, tmp_path, capsys) -> None:
    rc, err = run([a.format(r=results, tmp=tmp_path) for a in argv], capsys)
    assert rc == 2 and needle in err
    assert not (tmp_path / "c.yaml").exists()


# ---- 6. messages that name the file ---------------------------------------------------------

@pytest.mark.parametrize(("content", "needle"), [
    (b"", "is empty"),
    (bytes(range(128, 256)) * 4, "not UTF-8 text"),
    (b"lr,loss\n0.01,2.0\n0.02,1.9,7\n", "not a regular table"),
])
def test_unreadable_results_files_are_named(content, needle, tmp_path, capsys) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_bytes(content)
    for argv in (["fit", "optimum", str(bad), "--json"],
                 ["transfer", "--results", str(bad), "--target-width", "256", "--tokens", "1e6",
                  "--out", str(tmp_path / "c.yaml")]):
        rc, err = run(argv, capsys)
        assert rc == 2 and needle in err and str(bad) in err and one_line(err)


# ---- the output guard: no output is an input, the study or another output of the run ---------

SCALING = ["sweep", "scaling", "--preset", "gpt-tiny", "--width", "32", "--batch-sizes", "8,16,32,64",
           "--tokens", "32768,65536,131072,262144", "--lr-center", "0.0072", "--set", "seq_len=64",
           "--runner", "sweeps.runners:synthetic_scaling_runner", "--workers", "1", "--quiet", "--json"]


def test_audit_out_never_replaces_the_study(tmp_path, capsys) -> None:
    out = tmp_path / "sw"
    out.mkdir()
    journal = out / "optuna.journal"
    journal.write_bytes(b"the study")
    link = tmp_path / "link.journal"
    link.symlink_to(journal)
    for target in (journal, link, out / "." / "optuna.journal"):
        rc, err = run([*SCALING, "--holdout", "--out", str(out), "--audit-out", str(target)], capsys)
        assert rc == 2 and "--audit-out" in err and "study's storage" in err and str(journal) in err
        assert one_line(err)
    sqlite = tmp_path / "s.db"
    rc, err = run([*SCALING, "--holdout", "--storage", f"sqlite:///{sqlite}", "--audit-out", str(sqlite)],
                  capsys)
    assert rc == 2 and "study's storage" in err
    assert journal.read_bytes() == b"the study" and not sqlite.exists()


def _checkpoint(tmp_path):
    run_dir = tmp_path / "run"
    assert mutransfer_cli.main(["train", "--preset", "gpt-tiny", "--set", "width=32", "--set", "depth=1",
                                "--set", "seq_len=16", "--set", "batch_size=4", "--set", "steps=2",
                                "--set", "data_max_bytes=100000", "--set", "checkpoint_every=2",
                                "--out", str(run_dir), "--quiet"]) == 0
    return run_dir / "checkpoint.pt"


def test_fold_never_replaces_its_checkpoint(tmp_path, capsys) -> None:
    ck = _checkpoint(tmp_path)
    before = ck.read_bytes()
    link = tmp_path / "ln.pt"
    link.symlink_to(ck)
    for out in (ck, link):
        rc, err = run(["fold", str(ck), "--out", str(out)], capsys)
        assert rc == 2 and "the checkpoint" in err and str(ck) in err and one_line(err)
    assert ck.read_bytes() == before


def _card(tmp_path):
    from mutransfer.card.build import build_card, save_card
    from mutransfer.models.gpt import GPT, GPTConfig
    from mutransfer.parametrize.parametrization import Parametrization

    cfg = GPTConfig(width=64, depth=2, head_dim=16, seq_len=32, vocab_size=64)
    pz = Parametrization(lambda w: GPT(cfg.replace(width=w)), width=128, base_width=32)
    card = build_card(pz, lr=3e-3, optimizer={"name": "adamw", "weight_decay": 0.1},
                      schedule={"kind": "wsd", "warmup_steps": 10, "decay_fraction": 0.2, "total_steps": 100},
                      batch={"sequences": 8, "tokens": 256}, target={"width": 128, "depth": 2, "seq_len": 32})
    return save_card(card, tmp_path / "card.yaml")


def test_export_never_replaces_its_card(tmp_path, capsys) -> None:
    card = _card(tmp_path)
    before = card.read_bytes()
    rc, err = run(["export", str(card), "--to", "megatron", "--out", str(card)], capsys)
    assert rc == 2 and "the card" in err and one_line(err)
    assert card.read_bytes() == before


def test_transfer_never_replaces_its_fit(tmp_path, capsys) -> None:
    fit = tmp_path / "fit.json"
    fit.write_text("{}")
    rc, err = run(["transfer", "--fit", str(fit), "--target-width", "256", "--tokens", "1e6",
                   "--out", str(fit)], capsys)
    assert rc == 2 and "the --fit" in err and one_line(err)
    assert fit.read_text() == "{}"


# ---- validation before work ---------------------------------------------------------------

@pytest.mark.parametrize(("flag", "values"), [("--tokens", "32768,65536,131072"),
                                              ("--batch-sizes", "8,16,32")])
def test_holdout_needs_4_values_before_the_first_trial(flag, values, tmp_path, capsys) -> None:
    argv = list(SCALING)
    argv[argv.index(flag) + 1] = values
    out = tmp_path / "o"
    rc, err = run([*argv, "--holdout", "--out", str(out)], capsys)
    assert rc == 2 and "--holdout needs at least 4 distinct " + flag in err and one_line(err)
    assert not out.exists()  # no study, no trial


# ---- silent acceptance and tracebacks: exit 2, one line naming the value ---------------------

OPTIMUM = {"kind": "optimum", "x": "lr",
           "fits": [{"group": {"width": 64}, "x_opt": 0.01, "ci": [0.005, 0.02]}]}
SCALING_FIT = {
    "kind": "scaling", "lr": {"coef": 0.5, "exponents": {"batch_tokens": 0.3, "tokens": -0.1}},
    "batch": {"coef": 2.0, "exponents": {"tokens": 0.4}},
    "measured": {"tokens": [1e6, 8e6], "batch_tokens": [512, 8192], "seq_len": 64},
}


def _json(tmp_path, name, doc):
    import json

    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return str(path)


@pytest.mark.parametrize(("extra", "needle"), [
    (["--batch-rule", "published", "--batch-size", "8"], "--batch-rule published contradicts --batch-size 8"),
    (["--batch-rule", "fit", "--batch-tokens", "4096"], "--batch-rule fit contradicts --batch-tokens 4096"),
    (["--batch-tokens", "10"], "--batch-tokens 10 is below one sequence of 64 tokens"),
])
def test_transfer_batch_flags_that_would_be_ignored(extra, needle, tmp_path, capsys) -> None:
    fit = _json(tmp_path, "opt.json", OPTIMUM)
    rc, err = run(["transfer", "--fit", fit, "--target-width", "256", "--tokens", "1e6", *extra,
                   "--out", str(tmp_path / "c.yaml")], capsys)
    assert rc == 2 and needle in err and one_line(err)
    assert not (tmp_path / "c.yaml").exists()


@pytest.mark.parametrize(("fits", "needle"), [
    ([{"group": "width=64", "x_opt": 0.01}], "fits[0].group must be a mapping"),
    ([{"group": {"width": 64}, "x_opt": 0.01, "ci": 5}], "fits[0].ci must be an interval"),
    ([{"group": {"width": "wide"}, "x_opt": 0.01}], "fits[0].group.width must be a positive number"),
    ([{"group": {"width": 64}, "x_opt": "0.01"}], "fits[0].x_opt must be a number"),
])
def test_transfer_malformed_fit_json_names_the_field(fits, needle, tmp_path, capsys) -> None:
    fit = _json(tmp_path, "opt.json", {"kind": "optimum", "x": "lr", "fits": fits})
    rc, err = run(["transfer", "--fit", fit, "--target-width", "256", "--tokens", "1e6",
                   "--out", str(tmp_path / "c.yaml")], capsys)
    assert rc == 2 and needle in err and "opt.json" in err and one_line(err)


def test_transfer_scaling_fit_with_a_huge_exponent(tmp_path, capsys) -> None:
    doc = {**SCALING_FIT, "batch": {"coef": 2.0, "exponents": {"tokens": 1e5}}}
    rc, err = run(["transfer", "--lr", "0.01", "--proxy-batch-tokens", "1024", "--proxy-tokens", "2e6",
                   "--target-width", "256", "--tokens", "1e8",
                   "--scaling-fit", _json(tmp_path, "f.json", doc),
                   "--out", str(tmp_path / "c.yaml")], capsys)
    assert rc == 2 and "batch.exponents.tokens must lie in [-10, 10]" in err and one_line(err)


@pytest.mark.parametrize(("setting", "needle"), [
    ("data_dtype=int7", "data_dtype must be one of uint8, uint16, uint32 or None, got 'int7'"),
    ("steps=1e23", "steps must be at most 1,000,000,000"),  # read as --config reads it, one parser
    ("steps=1.5", "config field 'steps' expects int, got '1.5'"),
    ("steps=100000000000", "steps must be at most 1,000,000,000"),
    ("seed=-5", "seed must be a non-negative integer"),
    ("seed=5000000000", "seed must be at most 4,294,967,295"),
    ("width=100000000", "width must be at most 1,048,576"),
    ("lr=1e300", "lr must be at most 10000 (what a card may hold), got 1e+300"),
])
def test_train_config_values_a_real_run_cannot_have(setting, needle, capsys) -> None:
    rc, err = run(["train", "--set", setting], capsys)
    assert rc == 2 and needle in err and one_line(err)


def test_a_config_file_with_1e23_steps(tmp_path, capsys) -> None:
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("run:\n  steps: 1e23\n")
    rc, err = run(["train", "--config", str(cfg)], capsys)
    assert rc == 2 and "steps must be at most" in err and one_line(err)


@pytest.mark.parametrize("name", ["cfg.yaml", "card.yaml", "card.json"])
def test_a_binary_config_or_card_names_the_file(name, tmp_path, capsys) -> None:
    bad = tmp_path / name
    bad.write_bytes(bytes(range(128, 256)) * 4)
    argv = (["train", "--config", str(bad)] if name.startswith("cfg")
            else ["export", str(bad), "--to", "megatron", "--out", str(tmp_path / "m.json")])
    rc, err = run(argv, capsys)
    assert rc == 2 and "cannot decode" in err and str(bad) in err and "as UTF-8 text" in err
    assert one_line(err)


def test_a_results_group_at_a_negative_width(tmp_path, capsys) -> None:
    path = tmp_path / "neg.csv"
    rows = ["lr,loss,width"] + [f"{lr},{1 + (i - 2) ** 2 / 10},{w}" for w in (-64, 128)
                                for i, lr in enumerate([1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2])]
    path.write_text("\n".join(rows) + "\n")
    rc, err = run(["fit", "optimum", str(path), "--group", "width", "--json"], capsys)
    assert rc == 2 and "column 'width' holds -64 (data row 1)" in err and one_line(err)


def test_a_flat_loss_has_no_information(tmp_path, capsys) -> None:
    path = tmp_path / "flat.csv"
    rows = ["lr,loss,batch_tokens,tokens"] + [
        f"{lr},3.0,{b},{d}" for d in (1e5, 2e5, 4e5, 8e5) for b in (256, 512, 1024, 2048)
        for lr in (1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2)]
    path.write_text("\n".join(rows) + "\n")
    rc, err = run(["fit", "scaling", str(path), "--n-boot", "5", "--json"], capsys)
    assert rc == 2 and "no information" in err and one_line(err)


@pytest.mark.parametrize(("spec", "needle"), [
    ("kind: lr\nlog2_lr_min: abc\nlrs: [0.01]\n", "field 'log2_lr_min': 'abc' is not a number"),
    ("kind: lr\nbase: abc\n", "field 'base': 'abc' is not a mapping"),
    ("kind: lr\nwidths: [32, abc]\n", "field 'widths' item: 'abc' is not a number"),
    ("kind: lr\nlog2_lr_max: 2000\n", "field 'log2_lr_max': 2000 is outside [-64, 64]"),
])
def test_a_bad_sweep_spec_field_is_named_even_when_unused(spec, needle, tmp_path, capsys) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(spec)
    rc, err = run(["sweep", "lr", str(path), "--out", str(tmp_path / "o"), "--prepare-only"], capsys)
    assert rc == 2 and needle in err and one_line(err)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(("argv", "needle"), [
    (["--log2-lr-offsets=2000"], "--log2-lr-offsets"),
    (["--lr-center", "1e300", "--lr-batch-exponent", "1e5"], "argument --lr-center: '1e300' must be"),
    (["--lr-center", "1e-3", "--lr-batch-exponent", "1e5"], "argument --lr-batch-exponent: '1e5' must be"),
])
def test_lr_grids_beyond_floats_exit_2_not_overflow(argv, needle, tmp_path, capsys) -> None:
    base = [a for a in SCALING if a not in ("--lr-center", "0.0072")]
    rc, err = run([*base, *argv, "--out", str(tmp_path / "o"), "--prepare-only"], capsys)
    assert rc == 2 and needle in err and "Traceback" not in err


@pytest.mark.parametrize("argv", [["fit", "optimum", "{r}", "--seed", "-5", "--json"],
                                  ["sweep", "lr", "--lrs", "0.01", "--seeds", "-5", "--out", "{t}/o"]])
def test_a_negative_seed_is_named(argv, results, tmp_path, capsys) -> None:
    rc, err = run([a.format(r=results, t=tmp_path) for a in argv], capsys)
    assert rc == 2 and "-5" in err and "seed" in err and "non-negative integer" not in err


def test_a_state_dict_mismatch_shows_its_first_key() -> None:
    import torch

    from mutransfer.training.checkpoint import state_dict_error

    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))
    with pytest.raises(RuntimeError) as exc:
        model.load_state_dict({"0.weight": torch.zeros(2, 2)})
    msg = state_dict_error(exc.value)
    assert msg.startswith("Error(s) in loading state_dict for Sequential: Missing key(s) in state_dict: ")
    assert '"0.bias" (and 2 more)' in msg and "\n" not in msg


# ---- user code in `audit --entry` runs in a child process -----------------------------------

USER_ENTRIES = '''
import os, sys, time

def exits(width):
    sys.exit(0)

def crashes(width):
    raise RuntimeError("boom in user code")

def refuses(width):
    raise ValueError("bad width in user code")

def sleeps(width):
    time.sleep(60)

def dies(width):
    os._exit(3)

def mup_without_base_shapes(width):
    import mup, torch
    model = torch.nn.Sequential(torch.nn.Linear(8, width), mup.MuReadout(width, 4))
    return model, mup.MuAdam(model.parameters(), lr=1e-2)
'''


@pytest.mark.parametrize(("fn", "extra", "first", "tail"), [
    ("exits", [], "called sys.exit(0) before the audit finished", None),
    ("crashes", [], "raised RuntimeError: boom in user code", 'user_entries.py", line'),
    ("refuses", [], "raised ValueError: bad width in user code", 'user_entries.py", line'),
    ("sleeps", ["--timeout", "3"], "did not finish within 3 s", None),
    ("dies", [], "ended the audit's process (exit code 3)", None),
    ("mup_without_base_shapes", [], "no base shapes; call mup.set_base_shapes", None),
])
def test_audit_entry_that_does_not_finish_is_an_error(fn, extra, first, tail, tmp_path, monkeypatch,
                                                      capsys) -> None:
    (tmp_path / "user_entries.py").write_text(USER_ENTRIES)
    monkeypatch.chdir(tmp_path)
    rc, err = run(["audit", "--entry", f"user_entries:{fn}", "--widths", "32,64", "--no-coord-check",
                   *extra], capsys)
    lines = err.strip().splitlines()
    assert rc == 2 and f"--entry user_entries:{fn}" in lines[0] and first in lines[0]
    if tail is None:
        assert len(lines) == 1
    else:  # the traceback's tail, under the first line
        assert any(tail in ln for ln in lines[1:]) and lines[-1].endswith(first.split("raised ")[1])


def test_audit_help_says_the_entry_runs_as_the_user(capsys) -> None:
    assert mutransfer_cli.main(["audit", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "run with your permissions" in text and "current directory comes first on the import path" in text


# ---- which storage a sweep used -------------------------------------------------------------

LR_SWEEP = ["sweep", "lr", "--widths", "32", "-p", "mup", "--lrs", "0.001,0.002", "--runner", "synthetic",
            "--prepare-only"]


def test_out_with_the_storage_env_is_an_error_naming_both(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("MUTRANSFER_STORAGE", "postgresql://me:s3cret@db/sweeps")
    out = tmp_path / "o"
    rc, err = run([*LR_SWEEP, "--out", str(out)], capsys)
    assert rc == 2 and f"--out {out}" in err and "$MUTRANSFER_STORAGE" in err and one_line(err)
    assert "postgresql://me:***@db/sweeps" in err and "s3cret" not in err and not out.exists()
    # an explicit --storage says which one: the local journal, printed
    assert f"--storage {out}/optuna.journal" in err
    rc, err = run([*LR_SWEEP, "--out", str(out), "--storage", f"{out}/optuna.journal"], capsys)
    assert rc == 0 and f"storage: journal file {out.resolve()}/optuna.journal" in err


@pytest.mark.filterwarnings("ignore:Query string")
def test_the_sweep_prints_its_storage_masked(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("MUTRANSFER_STORAGE", f"sqlite:///{tmp_path}/s.db?password=s3cret")
    rc, err = run(LR_SWEEP, capsys)
    assert rc == 0 and f"storage: sqlite sqlite:///{tmp_path}/s.db?password=***" in err
    assert "s3cret" not in err


# ---- no network --------------------------------------------------------------------------------

def test_export_hf_config_hub_id_exits_2_before_any_request(tmp_path, monkeypatch, capsys) -> None:
    import socket

    def no_network(*args, **kwargs):
        raise AssertionError("a network connection was attempted")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    card = _card(tmp_path)
    rc, err = run(["export", str(card), "--to", "hf", "--hf-config", "org/model",
                   "--out", str(tmp_path / "h.json")], capsys)
    assert rc == 2 and "--hf-config 'org/model' is not a local file or folder" in err and one_line(err)
    assert not (tmp_path / "h.json").exists()


@pytest.mark.parametrize(("var", "value"), [("MUTRANSFER_PROGRESS_INTERVAL", "1e300"),
                                            ("MUTRANSFER_PROGRESS_INTERVAL", "abc"),
                                            ("MUTRANSFER_BUILD_TIMEOUT", "0")])
def test_a_bad_setting_is_refused_before_a_sweep_writes_anything(var, value, tmp_path, monkeypatch,
                                                                 capsys) -> None:
    monkeypatch.setenv(var, value)
    out = tmp_path / "o"
    rc, err = run([*LR_SWEEP[:-1], "--workers", "1", "--out", str(out)], capsys)
    assert rc == 2 and one_line(err) and f"${var}={value!r}" in err, err
    assert not out.exists()  # no optuna.journal, no sweep.yaml: nothing to clean up or resume


@pytest.mark.parametrize(("argv", "needle"), [
    (["fit", "optimum", "{r}", "--json", "--diverged", "divergd"], "--diverged 'divergd' is not a column of"),
    (["fit", "optimum", "{r}", "--json", "--state", ""], "--state '' is not a column of the results table"),
    (["fit", "optimum", "{r}", "--json", "--seed-col", "sede"], "--seed-col 'sede' is not a column"),
    (["fit", "optimum", "{r}", "--band", "1e300"], "argument --band: '1e300' must be a finite number in"),
    (["plot", "loss-law", "{r}", "--compute", "1e300", "--out", "{o}/p.png"], "argument --compute:"),
    (["memory", "--params", "7B", "--width", "99999999999999999999999"], "argument --width:"),
    (["coord-check", "--model", "mlp", "--data", "{o}/tokens.bin", "--out", "{o}/cc", "--widths", "16,32",
      "--steps", "1", "--n-seeds", "1", "--no-plot", "--quiet"], "--data '"),
    (["coord-check", "--depth-alpha", "nan", "--out", "{o}/cc"], "argument --depth-alpha: 'nan' must be"),
])
def test_a_flag_that_was_taken_silently_is_named(argv, needle, results, tmp_path, capsys) -> None:
    argv = [a.replace("{r}", str(results)).replace("{o}", str(tmp_path)) for a in argv]
    rc, err = run(argv, capsys)
    message = [ln for ln in err.splitlines() if not ln.startswith(("usage:", " "))]  # argparse's usage aside
    assert rc == 2 and len(message) == 1 and needle in message[0], err
    assert not (tmp_path / "p.png").exists() and not (tmp_path / "cc").exists()


def test_a_tensorboard_folder_that_cannot_be_made_is_named_before_any_run(tmp_path, capsys) -> None:
    (tmp_path / "file.txt").write_text("")
    out = tmp_path / "o"
    rc, err = run([*LR_SWEEP, "--out", str(out), "--track", f"tensorboard:{tmp_path}/file.txt/tb"], capsys)
    assert rc == 2 and one_line(err) and f"'{tmp_path}/file.txt' is a file" in err, err
    assert not out.exists()  # not a study whose every trial fails at its tracker's start
