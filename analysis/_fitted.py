"""The fitted-state check every fit class uses, modelled on scikit-learn's.

scikit-learn is not a dependency, so its ``NotFittedError`` is mirrored here: the same
bases (``ValueError`` and ``AttributeError``, so code that catches either keeps working)
and the same rule as ``sklearn.utils.validation.check_is_fitted``: an estimator is fitted
once ``fit`` has set its attributes that end in an underscore.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["NotFittedError", "check_is_fitted"]


class NotFittedError(ValueError, AttributeError):
    """A fit's result was asked for before ``fit`` (or ``from_dict``) ran.

    As scikit-learn's ``sklearn.exceptions.NotFittedError``: a ``ValueError`` and an
    ``AttributeError``.
    """


def check_is_fitted(estimator: Any, attributes: str | Iterable[str] | None = None) -> None:
    """Raise :class:`NotFittedError` unless ``estimator`` holds its fitted ``attributes``.

    ``attributes``: the attribute name(s) ``fit`` sets (all must be present); None, as
    scikit-learn does, means any instance attribute ending in ``_`` (not ``__``).
    """
    if attributes is None:
        fitted = any(k.endswith("_") and not k.startswith("__") for k in vars(estimator))
    else:
        names = (attributes,) if isinstance(attributes, str) else tuple(attributes)
        fitted = all(hasattr(estimator, n) for n in names)
    if not fitted:
        name = type(estimator).__name__
        raise NotFittedError(f"this {name} is not fitted yet; call fit() first.")
