"""Phase timing for worker jobs (no torch import, so a job can time its own imports)."""

from __future__ import annotations

import time


class Laps:
    """Seconds per named phase of a job (a phase named twice accumulates), for its `phases`."""

    def __init__(self) -> None:
        self.phases: dict[str, float] = {}
        self._t = time.monotonic()

    def __call__(self, name: str) -> None:
        now = time.monotonic()
        self.phases[name] = round(self.phases.get(name, 0.0) + now - self._t, 3)
        self._t = now
