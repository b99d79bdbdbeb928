"""Every figure, under one contract (figures/contract.py)."""
