"""Phase timing for worker jobs, and the host's CPU time (no torch import, so a job can time its
own imports and a sampler can read the host's load without torch)."""

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


def cpu_times() -> tuple[int, int] | None:
    """(all, idle) jiffies of the host's CPUs from /proc/stat (None where there is none)."""
    try:
        with open("/proc/stat") as f:
            vals = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    return (sum(vals), vals[3] + (vals[4] if len(vals) > 4 else 0)) if len(vals) > 3 else None
