"""A local rule that does its own work around the strategy's own rule, which it runs unchanged."""

from typing import Any

from torch import Tensor

from lightfed.core.local_rule import LocalRule
from lightfed.core.requirements import Requirements


class AroundInner(LocalRule):
    """Runs ``inner`` (the strategy's own rule; None: plain steps) unchanged: its steps, requirements and report. A
    subclass adds its own work in ``start`` and its own values to ``report``."""

    def __init__(self, inner: LocalRule | None) -> None:
        self.inner = inner
        self.takes_step = inner is not None and inner.takes_step
        self.gradients_per_step = 1 if inner is None else inner.gradients_per_step

    @property
    def requirements(self) -> Requirements:  # type: ignore[override]
        return self.inner.requirements if self.inner is not None else Requirements()

    def adjust(self, grad: Tensor, params: Tensor) -> None:
        if self.inner is not None:
            self.inner.adjust(grad, params)

    def observe(self, grad: Tensor) -> None:
        if self.inner is not None:
            self.inner.observe(grad)

    def report(self) -> dict[str, Any]:
        return self.inner.report() if self.inner is not None else {}
