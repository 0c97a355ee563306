"""Proxy models and their presets."""

from __future__ import annotations


