"""Sweep definitions, the sweep runner, result export and per-cell verification (scripts)."""
