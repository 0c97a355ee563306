"""analysis.check_single_valued: a results table must not mix tokenizers or models."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis.results import check_single_valued


def test_mixed_values_name_the_column_and_every_value() -> None:
    df = pd.DataFrame({"loss": [1.0, 2.0, 3.0], "tokenizer": ["bytes", "a1b2c3d4e5f6", "bytes"]})
    with pytest.raises(ValueError, match=r"in t\.csv mixes 2 values of column 'tokenizer' "
                                         r"\('a1b2c3d4e5f6', 'bytes'\)"):
        check_single_valued(df, where="in t.csv")
    with pytest.raises(ValueError, match="'arch'"):
        check_single_valued(pd.DataFrame({"arch": ["gpt", "llama"]}))


def test_one_value_absent_columns_and_missing_cells_pass() -> None:
    check_single_valued(pd.DataFrame({"tokenizer": ["bytes", np.nan, "bytes"], "arch": ["gpt"] * 3}))
    check_single_valued(pd.DataFrame({"loss": [1.0, 2.0]}))
    check_single_valued(pd.DataFrame({"tokenizer": ["x", "y"]}), columns=("arch",))
