"""One exporter per training engine: the card in Hugging Face, torchtitan and Megatron
terms (``_common``: what they share; ``torchtitan_model``: the μP converter for
torchtitan's own models, importable where torchtitan is installed)."""
