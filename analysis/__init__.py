"""Figures and the claims report for the BAPO reproduction.

Reads only the run-dir format (notes/run_dir_spec.md, README); never imports `src/`, so
committed results can be re-plotted without the training stack installed.
"""
