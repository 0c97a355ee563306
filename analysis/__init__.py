"""analysis: fit hyperparameter optima, power laws, critical batch size and loss laws.

Pure pandas/scipy/matplotlib. It never imports torch or mutransfer, so a CSV of runs from
any framework is enough.
"""

from __future__ import annotations

__all__: list[str] = []
