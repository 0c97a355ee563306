"""The demo end to end at its 'tiny' size: every artefact, and a resumed re-run."""

from __future__ import annotations

import json

from mutransfer.cli import main


def test_demo_tiny_writes_report_summary_card_and_reuses_trials(tmp_path, capsys) -> None:
    out = tmp_path / "demo"
    assert main(["demo", "--size", "tiny", "--out", str(out), "--workers", "1", "--quiet"]) == 0
    s = json.loads((out / "summary.json").read_text())
    assert set(s["drift_octaves"]) == {"sp", "mup"}
    assert s["n_trials"] == 4 * 4 * 2 and s["ladder_ratio"] == 8
    assert all(v is not None and v >= 0 for v in s["drift_octaves"].values())
    assert s["coord_check"]["sp"]["passed"] is False
    assert s["target"]["width"] == 16 * 256
    for rel in s["images"].values():
        assert (out / rel).read_bytes()[:4] == b"\x89PNG"
    md = (out / "report.md").read_text()
    assert "| SP |" in md and "| muP |" in md and "card.yaml" in md
    assert (out / "report.html").read_text().startswith("<!doctype html>")
    assert (out / "card.yaml").exists() and (out / "results.csv").exists()
    # Re-running reuses the finished trials: same table, same numbers.
    before = (out / "results.csv").read_text()
    assert main(["demo", "--size", "tiny", "--out", str(out), "--workers", "1", "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert (out / "results.csv").read_text() == before
    assert again["drift_octaves"] == s["drift_octaves"]
