"""Tuning an existing policy with Optuna: a study over its PARAMS and the mechanism's knobs."""
