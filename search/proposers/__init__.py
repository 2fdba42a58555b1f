"""Proposers write candidate programs: offline program evolution, or an LLM."""
