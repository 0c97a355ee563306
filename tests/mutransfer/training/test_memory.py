from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

import mutransfer_cli as cli
import mutransfer_cli.memory as memory_cli
from mutransfer.training.memory import OPTIMIZERS, parse_count, training_memory


@pytest.fixture
def with_verb(monkeypatch: pytest.MonkeyPatch) -> None:
    # The lead owns cli/__init__.py; register the verb for these tests only.
    monkeypatch.setitem(cli.VERBS, "memory", ("mutransfer_cli.memory", memory_cli.HELP))


def test_adamw_7b_is_112_gb_with_zero_breakdown() -> None:
    est = training_memory(7e9, "adamw")
    parts = {c.name: (c.dtype, c.bytes_per_param) for c in est.components}
    assert parts == {
        "weights": ("bf16", 2.0),
        "gradients": ("bf16", 2.0),
        "master weights": ("fp32", 4.0),
        "adam m (first moment)": ("fp32", 4.0),
        "adam v (second moment)": ("fp32", 4.0),
    }
    assert est.bytes_per_param == 16.0
    assert est.total_gb == pytest.approx(112.0)
    assert est.total_gib == pytest.approx(112e9 / 2**30)
    # ZeRO Sec. 3.1: 7.5B parameters -> 120 GB.
    assert training_memory(7.5e9).total_gb == pytest.approx(120.0)


@pytest.mark.parametrize(
    "optimizer,bpp",
    [
        ("adamw", 16),
        ("sgd", 8),
        ("sgd-momentum", 12),
        ("muon", 12),
        ("adam8bit", 10),
        ("adafactor", 8),
    ],
)
def test_bytes_per_param_table(optimizer: str, bpp: float) -> None:
    assert training_memory(7e9, optimizer).bytes_per_param == bpp
    # fp32 training: no master copy, weights and grads at 4 bytes each.
    assert training_memory(7e9, optimizer, "fp32").bytes_per_param == bpp


def test_optimizer_options() -> None:
    assert training_memory(1e9, "adafactor", width=4096).bytes_per_param == pytest.approx(
        8 + 8 / 4096
    )
    assert training_memory(1e9, "adafactor", adafactor_momentum=True).bytes_per_param == 12
    assert training_memory(1e9, "muon", adamw_fraction=0.25).bytes_per_param == 13
    assert set(OPTIMIZERS) == {"adamw", "sgd", "sgd-momentum", "muon", "adam8bit", "adafactor"}


def test_parse_count() -> None:
    assert parse_count("7e9") == parse_count("7B") == parse_count("7000000000") == 7e9
    assert parse_count("125M") == 125e6 and parse_count("1.5k") == 1500 and parse_count(3) == 3


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"n_params": 0}, "got 0"),
        ({"n_params": "-7e9"}, "'-7e9'"),
        ({"n_params": "seven"}, "'seven'"),
        ({"n_params": float("inf")}, "inf"),
        ({"n_params": 1e9, "optimizer": "lion"}, "'lion'"),
        ({"n_params": 1e9, "precision": "fp8"}, "'fp8'"),
        ({"n_params": 1e9, "optimizer": "adafactor", "width": 0}, "width must be"),
        ({"n_params": 1e9, "optimizer": "adamw", "adamw_fraction": 0.2}, "muon only"),
        ({"n_params": 1e9, "optimizer": "sgd", "adafactor_momentum": True}, "adafactor only"),
    ],
)
def test_bad_input(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        training_memory(**kwargs)  # type: ignore[arg-type]


def test_cli_table_and_json(
    with_verb: None, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert cli.main(["memory", "--params", "7e9", "--optimizer", "adamw"]) == 0
    out = capsys.readouterr().out
    total = next(line for line in out.splitlines() if line.startswith("total"))
    assert total.split()[1:] == ["16", "112.00", "104.31"]
    assert "master weights [fp32]" in out

    dest = tmp_path / "mem.json"
    assert (
        cli.main(
            ["memory", "--params", "7B", "--optimizer", "adam8bit", "--json", "--out", str(dest)]
        )
        == 0
    )
    doc = json.loads(capsys.readouterr().out)
    assert doc["bytes_per_param"] == 10 and doc["total_gb"] == pytest.approx(70.0)
    assert sum(c["bytes_per_param"] for c in doc["components"]) == 10
    assert json.loads(dest.read_text()) == doc
    assert [p.name for p in tmp_path.iterdir()] == ["mem.json"]  # no temp file left


@pytest.mark.parametrize(
    "argv,match",
    [
        (["--params", "0"], "got '0'"),
        (["--params=-1e9"], "'-1e9'"),
        (["--params", "7e9", "--optimizer", "lion"], "'lion'"),
    ],
)
def test_cli_bad_input_exits_2(
    with_verb: None, capsys: pytest.CaptureFixture[str], argv: list[str], match: str
) -> None:
    assert cli.main(["memory", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mutransfer memory: error:") and match in err
    assert len(err.strip().splitlines()) == 1


def test_run_directly_without_dispatcher(capsys: pytest.CaptureFixture[str]) -> None:
    p = argparse.ArgumentParser()
    memory_cli.add_arguments(p)
    assert memory_cli.run(p.parse_args(["--params", "1e9", "--optimizer", "sgd", "--json"])) == 0
    assert json.loads(capsys.readouterr().out)["total_gb"] == pytest.approx(8.0)
