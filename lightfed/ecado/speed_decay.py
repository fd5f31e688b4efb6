"""How fast a client's path was slowing down over its window, for ``beyond_window="decay"``."""

from collections.abc import Callable


class SpeedDecay:
    """Records the speed |dx/dt| at the start of a client's first and last steps; ``ratio()`` is rho, the speed at
    the window end T over the speed at 0 of the exponential decay through both, (|v_last| / |v_0|)^(T / t_last) with
    t_last when the last step began: 0 for a single step (no evidence the path goes on), at most 1 (a path that sped
    up is taken as steady)."""

    def __init__(self) -> None:
        self.first = 0.0
        self.last: Callable[[], float] = lambda: 0.0
        self.time = self.last_time = 0.0
        self.steps = 0

    def observe(self, speed: float | Callable[[], float], dt: float) -> None:
        """One step of length ``dt`` from a point where the path's speed (in any norm, up to a constant factor) is
        ``speed``: a number, or a function that measures it, called only for the first step and, by ``ratio``, the
        last (what it measures must stay unchanged until then)."""
        measure = speed if callable(speed) else lambda: speed
        if self.steps == 0:
            self.first = measure()
        self.last, self.last_time = measure, self.time
        self.time += dt
        self.steps += 1

    def ratio(self) -> float:
        if self.steps < 2 or self.first == 0 or self.last_time <= 0:
            return 0.0
        return min(1.0, (self.last() / self.first) ** (self.time / self.last_time))
