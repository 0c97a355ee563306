"""The CLI audit's harness: its classes on known outcomes, its table, and a sample of real
cases (the CLI run in forked processes) that must all pass."""

from __future__ import annotations

import pytest

from benchmarks import cli_audit as ca

CASE = ca.Case(id="t", verb="explain", argv=("explain", "--width", "0"), names=("--width", "width"))
USAGE = "usage: mutransfer explain [-h] [--model MODEL]\n                          [--width WIDTH]\n"


@pytest.mark.parametrize(("rc", "stderr", "kw", "klass", "why"), [
    (2, "mutransfer explain: error: argument --width: '0' must be >= 1\n", {}, "pass", "one line naming it"),
    (2, USAGE + "mutransfer explain: error: argument --width: '0' must be >= 1\n", {}, "pass", "naming it"),
    (2, "mutransfer explain: error: something is wrong\n", {}, "vague", "naming none"),
    (0, "", {}, "fail", "exit 0"),  # bad input accepted
    (1, "mutransfer explain: error: argument --width: 0\n", {}, "fail", "exit 1"),
    (1, "Traceback (most recent call last):\n  File \"x\", line 1\nZeroDivisionError: width\n", {}, "fail",
     "traceback"),
    (2, "Traceback (most recent call last):\nValueError: --width\n", {}, "fail", "traceback"),
    (2, "mutransfer explain: warning: --width odd\nmutransfer explain: error: --width 0\n", {}, "fail",
     "2 error lines"),
    (None, "", {"timed_out": True}, "fail", "hang"),
    (2, "mutransfer explain: error: --width 0\n", {"pwned": True}, "fail", "PWNED"),
    (2, "mutransfer explain: error: --width 0\n", {"half_written": ("card.yaml.tmp",)}, "fail", "left"),
    (2, f"mutransfer explain: error: cannot reach postgresql://u:{ca.SECRET}@h/db --width\n", {}, "fail",
     "password was printed"),
    (2, "mutransfer explain: error: --width 0\n", {"secret_in_files": ("run/config.yaml",)}, "fail",
     "written to run/config.yaml"),
])
def test_classify_known_outcomes(rc, stderr, kw, klass, why) -> None:
    got, reason = ca.classify(CASE, rc, "", stderr, **kw)
    assert got == klass and why in reason, (got, reason)


def test_an_accepted_input_passes_only_where_the_case_allows_it() -> None:
    may = ca.Case(id="t", verb="sweep lr", argv=(), rc=(0, 2), names=("study",))
    assert ca.classify(may, 0, "", "")[0] == "pass"
    assert ca.classify(may, 1, "", "mutransfer sweep: error: study\n")[0] == "fail"


def test_the_table_covers_every_verb_and_is_large() -> None:
    from mutransfer_cli import VERBS

    cases = ca.all_cases()
    assert len(cases) >= 400 and len({c.id for c in cases}) == len(cases)
    covered = {c.verb.split()[0] for c in cases} | {c.argv[0] for c in cases}
    assert set(VERBS) <= covered, set(VERBS) - covered
    flags = {(v, a.option_strings[0]) for v, a in ca.surface() if a.option_strings and a.nargs != 0}
    fed = {(c.verb, a) for c in cases for a in c.argv if a.startswith("--")}
    # every flag that takes a value is fed a bad one (on its verb, or a sibling sharing it)
    missed = {f for v, f in flags if not any(f == g or g.startswith(f + "=") for _, g in fed)}
    assert not missed, missed


SAMPLE = ["explain --width='0'", "explain --optimizer='bogus'", "fit optimum --n-boot='-1'",
          "sweep lr --workers='0'", "train --set nosuchfield=1", "train --set lr=nan", "sweep lr --sampler='bogus'",
          "fit optimum --x=nosuchcolumn", "fit optimum csv:loss=\"abc\"", "coord-check --steps='abc'",
          "env MUTRANSFER_PROGRESS_INTERVAL=1e300", "transfer --lr='nan'"]


def test_a_sample_of_real_cases_all_pass(tmp_path) -> None:
    table = {c.id: c for c in ca.all_cases()}
    sample = [table[i] for i in SAMPLE if i in table]
    assert len(sample) >= 10, [i for i in SAMPLE if i not in table]
    outcomes = ca.run_cases(sample, jobs=1, workdir=tmp_path, progress=False)
    bad = [(o.case.id, o.klass, o.why, o.stderr[-300:]) for o in outcomes if o.klass != "pass"]
    assert not bad, bad
    assert not any(p.name.startswith("case-") for p in tmp_path.iterdir())  # each case's folder removed
