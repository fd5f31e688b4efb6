"""Client-side update rules that several algorithms share. A rule of one algorithm only lives in its strategy's
module (``ProximalTerm`` in ``lightfed.strategies.fedprox``, ``RelativeProgressRule`` in
``lightfed.strategies.adaptfed``, ``MomentumCorrection`` in ``lightfed.strategies.masfl``) and is importable from
here as well."""

from importlib import import_module
from typing import Any

from lightfed.core.local_rule import LocalRule
from lightfed.local.correction import GradientCorrection
from lightfed.local.sharpness import SharpnessAware

# Imported when first asked for: the strategies' package imports the circuit family, which imports this package's
# shared rules, so importing a strategy module while this package loads would make an import cycle.
_IN_STRATEGIES = {
    "MomentumCorrection": "lightfed.strategies.masfl",
    "ProximalTerm": "lightfed.strategies.fedprox",
    "RelativeProgressRule": "lightfed.strategies.adaptfed",
}


def __getattr__(name: str) -> Any:
    """A rule of one algorithm, from its strategy's module.

    Raises:
        AttributeError: ``name`` is no rule kept in a strategy's module.
    """
    if name in _IN_STRATEGIES:
        return getattr(import_module(_IN_STRATEGIES[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "GradientCorrection",
    "LocalRule",
    "MomentumCorrection",
    "ProximalTerm",
    "RelativeProgressRule",
    "SharpnessAware",
]
