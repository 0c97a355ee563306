"""The proxy trainer: the config tree, token data and corpora, optimizers, schedules,
stabilizers, checkpoints, gradient noise scale, memory estimate, experiment tracking,
and fused multi-trial training."""
