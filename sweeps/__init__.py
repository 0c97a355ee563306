"""sweeps: Optuna studies over mutransfer proxies."""

from __future__ import annotations

__all__: list[str] = []
