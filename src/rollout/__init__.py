"""Rollout backends behind one protocol; chosen by `rollout.backend`."""

from src.rollout.base import Rollout, RolloutBackend

__all__ = ["Rollout", "RolloutBackend"]
