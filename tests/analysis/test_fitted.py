"""One fitted-state check for every fit: NotFittedError, as scikit-learn's."""

from __future__ import annotations

import math

import numpy as np
import pytest

from analysis import (
    ChinchillaFit,
    CriticalBatchFit,
    NotFittedError,
    OptimumFit,
    PowerLawFit,
    ScalingLawFit,
    check_is_fitted,
    plain,
)


def test_not_fitted_error_is_a_value_and_attribute_error() -> None:
    assert issubclass(NotFittedError, ValueError) and issubclass(NotFittedError, AttributeError)


@pytest.mark.parametrize("make, call", [
    (lambda: PowerLawFit("width", "lr"), lambda f: f.predict({"width": 64})),
    (lambda: CriticalBatchFit(), lambda f: f.predict(8)),
    (lambda: OptimumFit(), lambda f: f.group(1)),
    (lambda: ChinchillaFit(), lambda f: f.predict(1e6, 1e9)),
    (lambda: ScalingLawFit(), lambda f: f.predict_lr(1024, 1e6)),
    (lambda: ScalingLawFit(), lambda f: f.to_dict()),
])
def test_every_fit_raises_not_fitted_before_fit(make, call) -> None:
    fit = make()
    with pytest.raises(NotFittedError, match=f"this {type(fit).__name__} is not fitted yet"):
        call(fit)


def test_check_is_fitted_rules() -> None:
    class Est:
        pass

    e = Est()
    e.alpha = 1.0
    with pytest.raises(NotFittedError):
        check_is_fitted(e)  # scikit-learn's rule: no attribute ending in "_"
    with pytest.raises(NotFittedError):
        check_is_fitted(e, ["alpha", "params_"])  # every named attribute must be there
    e.params_ = {}
    check_is_fitted(e)
    check_is_fitted(e, ["alpha", "params_"])


def test_plain_is_json_data() -> None:
    got = plain({1: (np.float64(2.5), np.int64(3), np.bool_(True)), "x": [math.inf, "s", None]},
                nonfinite_to_none=True)
    assert got == {"1": [2.5, 3, True], "x": [None, "s", None]}
    assert type(got["1"][1]) is int and type(got["1"][2]) is bool
    assert math.isinf(plain([math.inf])[0])  # kept unless asked: a validator refuses it


def test_the_interval_level_is_level_and_ci_its_old_spelling() -> None:
    assert PowerLawFit(level=0.8).level == 0.8 and PowerLawFit(ci=0.8).level == 0.8
    assert OptimumFit(ci=0.8).level == 0.8 and ChinchillaFit(level=0.8).level == 0.8
    with pytest.raises(ValueError, match="level=0.8 and its old spelling ci=0.9"):
        CriticalBatchFit(level=0.8, ci=0.9)
    with pytest.raises(ValueError, match="level"):
        PowerLawFit(level=1.5)


def test_a_call_s_level_is_level_and_interval_its_old_spelling() -> None:
    x = np.array([64.0, 128.0, 256.0, 512.0, 1024.0])
    fit = PowerLawFit("width", "lr", n_boot=0).fit(x, 0.5 * x**-1.0 * np.exp([0.01, -0.02, 0.0, 0.02, -0.01]))
    new, old = fit.predict([2048.0], level=0.8), fit.predict([2048.0], interval=0.8)
    assert new.lo[0] == old.lo[0] and new.hi[0] == old.hi[0] and new.lo[0] < new.point[0] < new.hi[0]
    with pytest.raises(ValueError, match="level=0.8 and its old spelling interval=0.9"):
        fit.predict([2048.0], level=0.8, interval=0.9)
