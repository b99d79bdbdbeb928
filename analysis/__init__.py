"""Figures and the claims report for the BAPO reproduction.

Reads only the run-dir format (docs/run_dir.md); never imports `src/`, so
committed results can be re-plotted without the training stack installed.
"""
