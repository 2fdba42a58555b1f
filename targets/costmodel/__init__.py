"""Measured kernel times and the cost model every target's simulator reads (no torch needed to read)."""
