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
    from mutransfer.card.build import build_card, save_card
    from mutransfer.models.gpt import GPT, GPTConfig
    from mutransfer.parametrize.parametrization import Parametrization

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
    from mutransfer.card.build import MAX_CARD_BYTES

    for suffix in (".yaml", ".json"):
        big = tmp_path / f"big{suffix}"
        big.write_text(card_text + "# " + "x" * MAX_CARD_BYTES + "\n")
        t0 = time.perf_counter()
        rc, err = run(["export", big, "--to", "megatron", "--out", tmp_path / "m.json"], capsys)
        assert rc == 2 and f"above the limit of {MAX_CARD_BYTES:,}" in err and str(big) in err
        assert one_line(err)
        assert time.perf_counter() - t0 < 5


# ---- bounds before allocation, no secret in a card, a model config that says too little -----

LLAMA = {"model_type": "llama", "hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 4, "intermediate_size": 344, "vocab_size": 256,
         "max_position_embeddings": 256}


def _hf(tmp_path, **changes):
    import json

    doc = {k: v for k, v in {**LLAMA, **changes}.items() if v is not None}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(doc))
    return path


TRANSFER_HF = ["transfer", "--lr", "0.01", "--tokens", "1e8", "--batch-size", "8"]


@pytest.mark.parametrize(("changes", "needle"), [
    ({"vocab_size": 10**10}, "vocab_size 10,000,000,000 is above the limit 16,777,216 (2.6e+12 parameters, "
                             "10.2 TB in fp32)"),
    ({"vocab_size": 1e10}, "vocab_size must be an integer, got 10000000000.0"),
    ({"hidden_size": 2**40}, "hidden_size 1,099,511,627,776 is above the limit 1,048,576"),
    ({"hidden_size": -64}, "hidden_size must be >= 1, got -64"),
    ({"num_attention_heads": None}, "has no num_attention_heads: transformers would take its default"),
    ({"hidden_size": 1 << 20, "num_hidden_layers": 10_000, "intermediate_size": 1 << 22},
     "these sizes imply 1.8e+17 parameters, 7e+05 TB in fp32, above the limit of 1e+13 parameters"),
])
def test_an_hf_config_size_is_checked_before_anything_is_built(changes, needle, tmp_path, capsys) -> None:
    cfg = _hf(tmp_path, **changes)
    rc, err = run([*TRANSFER_HF, "--model", f"hf:{cfg}", "--out", tmp_path / "c.yaml"], capsys)
    assert rc == 2 and needle in err and str(cfg) in err and one_line(err), err
    assert not (tmp_path / "c.yaml").exists()


def test_a_set_vocab_beyond_the_limit_is_refused_with_what_it_implies(tmp_path, capsys) -> None:
    rc, err = run(["transfer", "--lr", "0.01", "--tokens", "1e8", "--batch-size", "8", "--target-preset",
                   "gpt-small", "--set", "vocab_size=100000000000", "--allow-vocab-change",
                   "--out", tmp_path / "c.yaml"], capsys)
    assert rc == 2 and one_line(err)
    assert "vocab_size 100,000,000,000 is above the limit 16,777,216 (" in err and "TB in fp32)" in err


def test_a_model_url_is_not_imported_as_a_module(capsys) -> None:
    rc, err = run(["train", "--model", "https://example.com/config.json", "--quiet"], capsys)
    assert rc == 2 and "model 'https://example.com/config.json' is a URL; mutransfer never downloads" in err
    assert one_line(err)


def test_no_secret_of_the_users_config_reaches_the_card(tmp_path, capsys) -> None:
    cfg = _hf(tmp_path, vocab_size=256, hf_token="hf_" + "a1" * 16, api_key="sk-" + "x" * 24,
              dataset_url="https://me:pa55word@data.example.com/set", note="keep me",
              bos_token_id=1)
    out = tmp_path / "c.yaml"
    rc, _ = run([*TRANSFER_HF, "--model", f"hf:{cfg}", "--out", out], capsys)
    text = out.read_text()
    assert rc == 0 and "a1a1a1" not in text and "xxxx" not in text and "pa55word" not in text
    from mutransfer.card.build import load_card

    model = load_card(out)["target"]["model"]
    assert model["redacted"] == ["api_key (dropped)", "dataset_url (URL password masked)",
                                 "hf_token (dropped)"]
    assert model["config"]["dataset_url"] == "https://me:***@data.example.com/set"
    assert model["config"]["note"] == "keep me" and model["config"]["bos_token_id"] == 1


def test_the_card_masks_every_secret_form_mask_url_masks(tmp_path, capsys) -> None:
    # the forms the card's old rule left (part of) as they were: '@' and '/' in a password,
    # ?password=, user:pw@host without a scheme, keys in camelCase or with the word first
    s = "S3CRETQZ"
    cfg = _hf(tmp_path, vocab_size=256, hub_url=f"https://bob:{s}@RETAT@hub.example.com/m",
              proxy=f"http://carol:pa/{s}@proxy:8080", db=f"postgresql://u@h/db?password={s}",
              mirror=f"alice:{s}@mirror.example.com", myApiKey=s, passphrase=s, token_hf=s)
    out = tmp_path / "c.yaml"
    rc, _ = run([*TRANSFER_HF, "--model", f"hf:{cfg}", "--out", out], capsys)
    assert rc == 0 and s not in out.read_text()
    from mutransfer.card.build import load_card

    model = load_card(out)["target"]["model"]
    assert model["config"]["hub_url"] == "https://bob:***@hub.example.com/m"
    assert model["config"]["mirror"] == "alice:***@mirror.example.com"
    assert {"myApiKey (dropped)", "passphrase (dropped)", "token_hf (dropped)", "proxy (URL password masked)",
            "db (URL password masked)"} <= set(model["redacted"])


# ---- flags that used to be accepted silently ---------------------------------------------------

SCALING = ["sweep", "scaling", "--preset", "gpt-tiny", "--width", "32", "--batch-sizes", "8,16,32,64",
           "--tokens", "32768,65536,131072,262144", "--lr-center", "0.0072", "--set", "seq_len=64",
           "--runner", "sweeps.runners:synthetic_scaling_runner", "--workers", "1", "--quiet", "--json"]


@pytest.mark.parametrize(("extra", "needle"), [
    (["--holdout-seeds", "3"], "--holdout-seeds 3 only goes with --holdout"),
    (["--max-extend", "1000000000"], "--max-extend '1000000000' is above the limit 100"),
    (["--batch-range", "1000,2000"], "--batch-range 1000,2000 excludes every batch size of the grid "
                                     "(8,16,32,64)"),
])
def test_sweep_flags_that_would_do_nothing_or_too_much(extra, needle, tmp_path, capsys) -> None:
    out = tmp_path / "sw"
    rc, err = run([*SCALING, *extra, "--out", out], capsys)
    # (an argparse type error prints the usage above its one error line)
    assert rc == 2 and needle in err and one_line(err.split("\n" + "mutransfer sweep scaling: error")[-1])
    assert not out.exists()


def test_accept_edge_with_no_edge_says_so(tmp_path, capsys) -> None:
    import json

    fit = tmp_path / "f.json"
    fit.write_text(json.dumps({
        "kind": "scaling", "lr": {"coef": 0.5, "exponents": {"batch_tokens": 0.3, "tokens": -0.1}},
        "batch": {"coef": 2.0, "exponents": {"tokens": 0.4}},
        "measured": {"tokens": [1e6, 8e6], "batch_tokens": [512, 8192], "seq_len": 64}}))
    rc, err = run(["transfer", "--lr", "0.01", "--proxy-batch-tokens", "1024", "--proxy-tokens", "2e6",
                   "--target-width", "256", "--tokens", "1e7", "--scaling-fit", fit, "--batch-rule", "fit",
                   "--accept-edge", "lr", "--out", tmp_path / "c.yaml"], capsys)
    assert rc == 0
    said = [ln for ln in err.splitlines() if "--accept-edge lr" in ln]
    assert said == ["mutransfer transfer: warning: --accept-edge lr accepted nothing: the fit's lr is not at "
                    "an edge of its grid here"], err


def _checkpoint(tmp_path, *model):
    run_dir = tmp_path / "run"
    assert mutransfer_cli.main(["train", *model, "--set", "width=32", "--set", "depth=1", "--set",
                                "seq_len=16", "--set", "batch_size=4", "--set", "steps=2", "--set",
                                "data_max_bytes=100000", "--set", "checkpoint_every=2", "--out", str(run_dir),
                                "--quiet"]) == 0
    return run_dir


def test_fold_says_what_a_checkpoint_is_and_writes_only_pt(tmp_path, capsys) -> None:
    cfg = _hf(tmp_path)
    run_dir = _checkpoint(tmp_path, "--model", f"hf:{cfg}")
    ck = run_dir / "checkpoint.pt"
    capsys.readouterr()
    rc, err = run(["fold", ck, "--out", tmp_path / "f.pt"], capsys)
    assert rc == 2 and f"is of your own model (hf:{cfg})" in err and one_line(err)
    assert "holds no trainer config" not in err
    rc, err = run(["fold", run_dir, "--out", tmp_path / "f.pt"], capsys)
    assert rc == 2 and "is a directory, not a checkpoint file; it holds" in err and one_line(err)
    rc, err = run(["fold", ck, "--out", tmp_path / "f.txt"], capsys)
    assert rc == 2 and "--out" in err and "must end in .pt or .pth" in err and one_line(err)
    assert not (tmp_path / "f.pt").exists() and not (tmp_path / "f.txt").exists()


def test_export_writes_only_json_or_yaml(card_text, tmp_path, capsys) -> None:
    card = tmp_path / "card.yaml"
    card.write_text(card_text)
    rc, err = run(["export", card, "--to", "megatron", "--out", tmp_path / "m.exe"], capsys)
    assert rc == 2 and "must end in .json, .yaml or .yml" in err and one_line(err)
    assert not (tmp_path / "m.exe").exists()
