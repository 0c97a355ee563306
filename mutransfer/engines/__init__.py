"""Adapters for third-party model libraries and training engines (optional extra
``[engines]``); nothing here imports them until called."""
