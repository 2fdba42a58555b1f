"""Deployments: a model on GPUs of one kind, priced from measured operators and published kernel figures.

deployment.py prices one (memory arithmetic, iteration time); gpus.py holds what each GPU's datasheet and
kernel papers say; catalog.py names the deployments every LLM target takes as `--set deployment=NAME`.
"""
