"""The README's "Your own model" short way: ``data prepare`` then ``tune``, whose own gate
(not ``--strict``) keeps a card it cannot stand behind from being written, with the flags a
CPU try-out shrinks (``--budget``, ``--device``). The block run end to end costs minutes
even at CPU size (tune's plan refuses a budget under about 8 minutes on one worker for a
width-64, vocab-512 proxy), so that run is recorded in
benchmarks/results/readme_llama32_run.md, not repeated here."""

from __future__ import annotations

from mutransfer_cli import build_parser


def test_the_short_way_is_data_prepare_then_a_budgeted_tune(readme_commands) -> None:
    prepare, tune = readme_commands("## Your own model")
    assert prepare[:2] == ["data", "prepare"] and tune[0] == "tune"
    # tune reads the tokens data prepare wrote, and the budget and device are the flags to shrink
    assert f"data={prepare[prepare.index('--out') + 1]}" in tune
    args = build_parser("tune").parse_args([*tune[:tune.index("--budget") + 1], "90s", "--device", "cpu",
                                      *tune[tune.index("--out"):]])
    assert (args.budget, args.device, args.model) == (90.0, "cpu", "hf:my-llama/config.json")
    assert "--strict" not in tune  # tune refuses by itself: no flag to forget
