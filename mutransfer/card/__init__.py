"""The transfer card: the target model and its run plan, the card built, saved, loaded,
validated, trusted and applied to a model, and exported to training engines."""
