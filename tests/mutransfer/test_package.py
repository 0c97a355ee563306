"""Package-level promises: lazy heavy imports and a complete public API."""

from __future__ import annotations

import subprocess
import sys

import mutransfer


def test_import_is_lazy() -> None:
    code = ("import sys, mutransfer, analysis, sweeps; "
            "print(sorted(m for m in ('torch', 'optuna', 'scipy', 'matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_every_public_name_resolves() -> None:
    for name in mutransfer.__all__:
        assert getattr(mutransfer, name) is not None, name


def test_python_dash_m_runs_the_cli() -> None:
    out = subprocess.run([sys.executable, "-m", "mutransfer_cli", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "coord-check" in out.stdout
    bad = subprocess.run([sys.executable, "-m", "mutransfer_cli", "frobnicate"], capture_output=True,
                         text=True)
    assert bad.returncode == 2 and "unknown command 'frobnicate'" in bad.stderr


def test_atomic_writes_leave_no_temp_file_and_normal_permissions(tmp_path) -> None:
    import os

    import pytest

    from mutransfer._io import atomic_open, atomic_write_text

    path = atomic_write_text(tmp_path / "a.txt", "hello")
    umask = os.umask(0)
    os.umask(umask)
    assert path.read_text() == "hello" and (path.stat().st_mode & 0o777) == 0o666 & ~umask
    with pytest.raises(RuntimeError), atomic_open(tmp_path / "b.txt") as fh:
        fh.write("half")
        raise RuntimeError("boom")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]


def test_read_json_names_the_file_for_each_failure(tmp_path) -> None:
    """mutransfer._io.read_json: the layer's one JSON reader (cards, fits, audits, exports)."""
    import json

    import pytest

    from mutransfer._io import read_json

    good = tmp_path / "a.json"
    good.write_text(json.dumps({"eps": 1e-08, "x": [1, 2]}))
    assert read_json(good, "fit file") == {"eps": 1e-08, "x": [1, 2]}  # 1e-08 a float, not YAML's str
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    binary = tmp_path / "bin.json"
    binary.write_bytes(b"\xff\xfe\x00")
    for path, kw, why in ((tmp_path / "missing.json", {}, "does not exist"),
                          (bad, {}, "is not valid JSON"), (deep, {}, "nested too deeply"),
                          (binary, {}, "cannot decode"), (good, {"max_bytes": 4}, "above the limit of 4")):
        with pytest.raises(ValueError, match=why) as exc:
            read_json(path, "audit file", **kw)
        assert f"audit file {str(path)!r}" in str(exc.value) and "\n" not in str(exc.value)
