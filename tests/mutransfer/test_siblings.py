"""A user's own ``analysis.py`` or ``sweeps.py`` first on sys.path is named in one line
(mutransfer._siblings), by ``import mutransfer`` and by the CLI, instead of a later
"'analysis' is not a package"."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mutransfer._siblings import ShadowedPackageError, check_siblings, shadowing

ROOT = Path(__file__).resolve().parents[2]


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run in ``cwd`` with this checkout's packages importable (the directory of the script, or
    the cwd for ``-m``/``-c``, still comes first on sys.path, as it does for a user)."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A user's folder: their own analysis.py and sweeps.py beside their script."""
    (tmp_path / "analysis.py").write_text("x = 1\n")
    (tmp_path / "sweeps.py").write_text("x = 1\n")
    (tmp_path / "script.py").write_text("from mutransfer import plan_run\n")
    return tmp_path


def test_a_script_beside_an_analysis_py_is_told_which_file(project: Path) -> None:
    out = _run(["script.py"], project)
    assert out.returncode != 0
    last = out.stderr.strip().splitlines()[-1]
    assert str(project / "analysis.py") in last and "shadows mutransfer's own 'analysis' package" in last
    assert "is not a package" not in out.stderr


@pytest.mark.parametrize("how", [["-m", "mutransfer_cli"],  # python -m mutransfer_cli
                                 # what the `mutransfer` console script runs
                                 ["-c", "import sys; from mutransfer_cli import main; sys.exit(main())"]])
def test_the_cli_prints_one_line_and_exits_2(project: Path, how: list[str]) -> None:
    out = _run([*how, "transfer", "--help"], project)
    assert out.returncode == 2
    assert out.stderr.splitlines() == [
        f"mutransfer: {project / 'analysis.py'} shadows mutransfer's own 'analysis' package "
        "(it comes first on sys.path); rename that file"]
    (project / "analysis.py").unlink()  # the CLI checks sweeps too: the library never imports it
    out = _run([*how, "transfer", "--help"], project)
    assert out.returncode == 2 and out.stderr.splitlines() == [
        f"mutransfer: {project / 'sweeps.py'} shadows mutransfer's own 'sweeps' package "
        "(it comes first on sys.path); rename that file"]


def test_without_a_shadow_the_script_and_the_cli_run(tmp_path: Path) -> None:
    (tmp_path / "script.py").write_text("from mutransfer import plan_run\nprint(plan_run.__module__)\n")
    out = _run(["script.py"], tmp_path)
    assert out.returncode == 0 and out.stdout.strip() == "mutransfer.card.plan", out.stderr
    out = _run(["-m", "mutransfer_cli", "transfer", "--help"], tmp_path)
    assert out.returncode == 0 and out.stderr == "", out.stderr


def test_shadowing_names_the_file_or_folder_that_comes_first(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    assert shadowing("analysis") is None and shadowing("sweeps") is None  # ours, as imported here
    assert shadowing("no_such_package_here") is None  # not found: the import fails on its own
    monkeypatch.delitem(sys.modules, "sweeps", raising=False)  # resolve it afresh
    monkeypatch.syspath_prepend(str(tmp_path))
    assert shadowing("sweeps") is None
    (tmp_path / "sweeps").mkdir()  # a folder without __init__.py: ours, a regular package, wins
    assert shadowing("sweeps") is None
    (tmp_path / "sweeps" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))  # drop the finders' cached listings
    assert shadowing("sweeps") == str(tmp_path / "sweeps")
    with pytest.raises(ShadowedPackageError, match=r"sweeps shadows .* rename that folder$") as err:
        check_siblings(("analysis", "sweeps"))
    assert err.value.shadowing == str(tmp_path / "sweeps") and isinstance(err.value, ImportError)
