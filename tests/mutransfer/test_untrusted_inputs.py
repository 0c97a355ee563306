"""Inputs an attacker or a slip could hand a verb: hand-edited cards, half-written datasets,
sizes that would reach the allocator, secrets in a config, and values that used to be
accepted silently. Each is exit 2 and one line naming the bad value, before any work, with
nothing half-written."""

from __future__ import annotations

import time

import pytest

import mutransfer_cli


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    rc = mutransfer_cli.main([str(a) for a in argv])
    return rc, capsys.readouterr().err


def one_line(err: str) -> bool:
    return len(err.strip().splitlines()) == 1


# ---- cards parsed safely -----------------------------------------------------------------------

@pytest.fixture(scope="module")
def card_text(tmp_path_factory) -> str:
    from mutransfer.card import build_card, save_card
    from mutransfer.models import GPT, GPTConfig
    from mutransfer.parametrization import Parametrization

    cfg = GPTConfig(width=64, depth=2, head_dim=16, seq_len=32, vocab_size=64)
    pz = Parametrization(lambda w: GPT(cfg.replace(width=w)), width=128, base_width=32)
    card = build_card(pz, lr=3e-3, optimizer={"name": "adamw", "weight_decay": 0.1},
                      schedule={"kind": "wsd", "warmup_steps": 10, "decay_fraction": 0.2, "total_steps": 100},
                      batch={"sequences": 8, "tokens": 256}, target={"width": 128, "depth": 2, "seq_len": 32})
    return save_card(card, tmp_path_factory.mktemp("card") / "card.yaml").read_text()


LAUGHS = "lol0: &a0 [lol]\n" + "".join(f"lol{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, "
                                       f"*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}]\n"
                                       for i in range(1, 10))


@pytest.mark.parametrize(("edit", "needle"), [
    (lambda t: t + "extra:\n" + "".join("  " + ln + "\n" for ln in LAUGHS.splitlines()),
     "holds aliases that expand past 1,000,000 nodes (line"),
    (lambda t: t + "loop: &loop [*loop]\n", "holds a self-referencing alias (line"),
    (lambda t: t + "extra: 1\n", "unknown section(s): extra"),
    (lambda t: t.replace("schema: mutransfer.card/v2", "schema: mutransfer.card/v1"),
     "is tagged 'mutransfer.card/v1' but holds section audit"),
    (lambda t: t + "x: " + "[" * 5000 + "]" * 5000 + "\n", "is nested too deeply to read"),
])
def test_a_hand_edited_card_is_refused_before_any_walk(edit, needle, card_text, tmp_path, capsys) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(edit(card_text))
    t0 = time.perf_counter()
    rc, err = run(["export", bad, "--to", "megatron", "--out", tmp_path / "m.json"], capsys)
    assert rc == 2 and needle in err and one_line(err), err
    assert time.perf_counter() - t0 < 10 and not (tmp_path / "m.json").exists()


def test_a_card_over_the_size_cap_is_refused_unparsed(card_text, tmp_path, capsys) -> None:
    from mutransfer.card import MAX_CARD_BYTES

    for suffix in (".yaml", ".json"):
        big = tmp_path / f"big{suffix}"
        big.write_text(card_text + "# " + "x" * MAX_CARD_BYTES + "\n")
        t0 = time.perf_counter()
        rc, err = run(["export", big, "--to", "megatron", "--out", tmp_path / "m.json"], capsys)
        assert rc == 2 and f"above the limit of {MAX_CARD_BYTES:,}" in err and str(big) in err
        assert one_line(err)
        assert time.perf_counter() - t0 < 5
