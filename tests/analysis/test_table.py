"""analysis.table.load_table: the checks every fit runs on a results table, known answers."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from analysis.table import dumps, group_dict, load_table, num, pair


def _csv(tmp_path, **cols) -> str:
    path = tmp_path / "r.csv"
    pd.DataFrame(cols).to_csv(path, index=False)
    return str(path)


def test_rows_not_complete_diverged_and_filtered_are_left_out_and_counted(tmp_path) -> None:
    path = _csv(tmp_path, lr=[1e-3, 2e-3, 4e-3, 8e-3, 1e-2], loss=[3.0, 2.9, np.nan, 2.95, 3.1],
                state=["COMPLETE", "COMPLETE", "COMPLETE", "PRUNED", "COMPLETE"],
                diverged=[False, False, True, False, False], width=[64, 64, 64, 64, 128])
    rows, counts = load_table(path, ["lr", "loss"], where=["width=64"])
    assert list(rows["lr"]) == [1e-3, 2e-3]  # the pruned and the diverged row are out
    assert counts == {"n_rows": 3, "n_diverged": 1, "n_dropped": 0, "n_not_complete": 1}
    kept, _ = load_table(path, ["lr", "loss"], where=["width=64"], keep_diverged=True)
    assert list(kept["lr"]) == [1e-3, 2e-3, 4e-3]


def test_a_missing_value_not_marked_diverged_is_an_error_naming_it_unless_dropna(tmp_path) -> None:
    path = _csv(tmp_path, lr=[1e-3, 2e-3, 4e-3], loss=[3.0, np.nan, 2.9])
    with pytest.raises(ValueError, match=r"column 'loss' has 1 missing .* data row 2"):
        load_table(path, ["lr", "loss"])
    rows, counts = load_table(path, ["lr", "loss"], dropna=True)
    assert len(rows) == 2 and counts["n_dropped"] == 1


def test_text_where_a_number_belongs_and_an_empty_filter_are_named(tmp_path) -> None:
    path = _csv(tmp_path, lr=["1e-3", "fast"], loss=[3.0, 2.9], width=[64, 64])
    with pytest.raises(ValueError, match=r"column 'lr' has a non-numeric value 'fast' \(data row 2\)"):
        load_table(path, ["lr", "loss"])
    with pytest.raises(ValueError, match="match --where width=32"):
        load_table(path, ["loss"], where=["width=32"])


def test_inf_where_allowed_is_dropped_and_counted(tmp_path) -> None:
    path = _csv(tmp_path, batch=[8, 16, 32], steps_to_target=[100.0, math.inf, 40.0])
    rows, counts = load_table(path, ["batch", "steps_to_target"], inf_ok=["steps_to_target"])
    assert list(rows["batch"]) == [8, 32] and counts["n_dropped"] == 1


def test_json_values_are_plain_and_strict() -> None:
    assert num(np.float32(0.5)) == 0.5 and num(float("inf")) is None
    assert pair(1, float("nan")) == [1.0, None]
    assert group_dict(["width", "p"], (np.int64(64), "mup")) == {"width": 64, "p": "mup"}
    assert json.loads(dumps({"a": 1.5})) == {"a": 1.5}
    with pytest.raises(ValueError):
        dumps({"a": float("nan")})
