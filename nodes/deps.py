"""What the nodes need from outside the graph: the toolbox and the models, injected by the caller."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from graph.context import Context
from nodes.models import ModelSet

ModelFactory = Callable[[Context, str], ModelSet]


@dataclass
class Deps:
    toolbox: Any  # tools.toolbox.Toolbox or a test double with the same methods
    model_factory: ModelFactory
    _cache: dict[tuple[str, str], ModelSet] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def models(self, settings: Context, thread: str) -> ModelSet:
        key = (thread, repr(settings))
        with self._lock:
            if key not in self._cache:
                self._cache[key] = self.model_factory(settings, thread)
            return self._cache[key]
