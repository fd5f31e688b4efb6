"""Experiments over many runs: ``lightfed compare``."""
