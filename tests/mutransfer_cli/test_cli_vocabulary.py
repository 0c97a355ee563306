"""One spelling per idea across verbs: seeds as a list, one ``--set`` reader (the
library's), and ``sweep results`` (the results table) apart from ``export`` (a card as an
engine's config)."""

from __future__ import annotations

import json

import pytest

from mutransfer_cli import build_parser, main
from mutransfer_cli.audit import DEFAULT_N_SEEDS, seed_count
from mutransfer_cli.train import build_config

SYN = ["--runner", "sweeps.runners:synthetic_runner"]


@pytest.mark.parametrize(("argv", "needle"), [
    (["--seeds", "2"], "--seeds 2"),                 # the old count: now seed 2, refused by name
    (["--seeds", "0,2"], "--seeds 0,2"),
    (["--seeds", "x"], "'x' is not an integer"),
    (["--seeds", "0,1", "--n-seeds", "2"], "not allowed with argument"),
    (["--n-seeds", "0"], "must be >= 1"),
])
def test_audit_seeds_are_a_list_and_bad_values_exit_2(argv: list[str], needle: str, capsys) -> None:
    assert main(["audit", "--model", "gpt-tiny", "--widths", "32,64", *argv]) == 2
    assert needle in capsys.readouterr().err


def test_coord_check_seed_list_and_count_exclude_each_other_even_at_the_default(capsys) -> None:
    assert main(["coord-check", "--seeds", "0,1", "--n-seeds", "3", "--out", "never"]) == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_audit_seed_list_and_count_name_the_same_seeds() -> None:
    assert seed_count([0, 1, 2]) == 3
    args = build_parser("audit").parse_args(["audit", "--model", "gpt-tiny", "--seeds", "0,1"])
    assert args.seeds == [0, 1] and seed_count(args.seeds) == DEFAULT_N_SEEDS == 2


def test_set_values_are_read_by_the_config_fields_type() -> None:
    """The CLI keeps a --set value as text; TrainConfig parses it by its field's type (an
    integer field takes 1e3, which a generic scalar parser made a float and refused)."""
    args = build_parser("train").parse_args(["train", "--set", "lr=3e-3", "--set", "eval-every=1e3",
                                             "--set", "schedule=wsd", "--set", "grad_clip=none"])
    assert args.overrides[1] == ("eval_every", "1e3")
    cfg = build_config(args)
    assert cfg.optim.lr == 0.003 and cfg.run.eval_every == 1000 and isinstance(cfg.run.eval_every, int)
    assert cfg.schedule.kind == "wsd" and cfg.stabilizers.grad_clip is None


def test_set_without_equals_exits_2_naming_it(capsys) -> None:
    assert main(["train", "--set", "lr"]) == 2
    assert "--set 'lr' must look like KEY=VALUE" in capsys.readouterr().err


def test_sweep_results_writes_the_table_and_export_is_gone(tmp_path, capsys) -> None:
    """`sweep results` writes the table; `sweep export`, its 0.1.0 name, is no verb (exit 2:
    `mutransfer export` is the engine export of a card, a different thing)."""
    out = tmp_path / "d"
    assert main(["sweep", "lr", "--widths", "32", "-p", "mup", "--lrs", "0.001,0.01", "--out", str(out),
                 "--workers", "1", "--quiet", "--set", "warmup-steps=1", *SYN]) == 0
    capsys.readouterr()
    assert main(["sweep", "results", "--storage", str(out), "--out", str(tmp_path / "a.csv"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"] == 2
    assert main(["sweep", "export", "--storage", str(out), "--out", str(tmp_path / "b.csv")]) == 2
    assert "invalid choice: 'export'" in capsys.readouterr().err
    assert not (tmp_path / "b.csv").exists()
