"""The callbacks' hooks called by name as ``Fabric.call`` calls them, each callback's signature read once instead of
at every call: ``Fabric.call`` runs ``inspect.signature`` on every callback with the hook, every time, which for two
callbacks took 3% of a round of many tiny clients."""

import inspect
from collections.abc import Callable
from typing import Any

from lightfed.callbacks.base import Callback


class CallbackCalls:
    """Calls a hook of ``callbacks`` in their order: each callback with a method of that name, with the positional
    arguments given and the keyword arguments its signature names (all of them where it takes ``**kwargs`` or has no
    signature to read), as ``Fabric.call`` does; a ``Callback`` whose hook is the base class's no-op is not called."""

    def __init__(self, callbacks: list[Any]) -> None:
        self.callbacks = callbacks
        self._names: dict[tuple[type, str], frozenset[str] | None] = {}  # what each class's hook takes (None: all)

    def listeners(self, hook: str) -> list[Any]:
        """The callbacks with a hook ``hook`` of their own."""
        quiet = getattr(Callback, hook, None)
        return [
            c for c in self.callbacks if callable(getattr(c, hook, None)) and getattr(type(c), hook, 0) is not quiet
        ]

    def __call__(self, hook: str, *args: Any, **kwargs: Any) -> None:
        for callback in self.listeners(hook):
            method = getattr(callback, hook)
            key = (type(callback), hook)
            if key not in self._names:
                self._names[key] = _taken(method)
            names = self._names[key]
            method(*args, **(kwargs if names is None else {name: v for name, v in kwargs.items() if name in names}))


def _taken(method: Callable[..., Any]) -> frozenset[str] | None:
    """The keyword arguments ``method`` takes (None: any, or a signature that cannot be read)."""
    try:
        parameters = inspect.signature(method).parameters.values()
    except (ValueError, TypeError):
        return None
    if any(p.kind == inspect.Parameter.VAR_KEYWORD for p in parameters):
        return None
    return frozenset(p.name for p in parameters)
