"""Checkpoints written before each source became its own module pickled their responses in
flight as `src.schedule.partial.InFlight`; this name keeps them loadable. The partial
source is src/schedule/sources/partial.py."""

from src.schedule.sources.partial import InFlight

__all__ = ["InFlight"]
