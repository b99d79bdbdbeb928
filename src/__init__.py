"""bapo-repro: off-policy RL objectives for language models, with per-token telemetry.

Importing it changes nothing in the process: the entry points pin the numerics before torch
loads (src/pinning.py `pin_process`).
"""
