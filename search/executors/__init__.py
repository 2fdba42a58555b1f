"""Executors the run service hands a search's sandbox jobs to: `concurrent.futures`-shaped, one per module."""
