"""The trainer calls the callbacks' hooks as ``Fabric.call`` does, reading each signature once."""

import inspect

from lightning.fabric import Fabric

from lightfed.callbacks import Callback
from lightfed.callbacks.calls import CallbackCalls


class Recorder:
    """A plain object (not a ``Callback``) whose hook takes some of the keyword arguments."""

    def __init__(self, calls: list) -> None:
        self.calls = calls

    def on_round_end(self, trainer, metrics):
        self.calls.append(("recorder", trainer, metrics))


class TakesAll(Callback):
    def __init__(self, calls: list) -> None:
        self.calls = calls

    def on_round_end(self, trainer, **kwargs):
        self.calls.append(("all", trainer, sorted(kwargs)))


class Quiet(Callback):
    """Overrides no hook: ``Callback``'s no-ops are not called."""


def test_hooks_are_called_as_fabric_calls_them_with_each_signature_read_once(monkeypatch):
    ours: list = []
    fabric_calls: list = []
    ours_callbacks = [Recorder(ours), Quiet(), TakesAll(ours), object()]
    fabric = Fabric(accelerator="cpu", devices=1, callbacks=[Recorder(fabric_calls), Quiet(), TakesAll(fabric_calls)])
    calls = CallbackCalls(ours_callbacks)
    read = []
    signature = inspect.signature
    monkeypatch.setattr(inspect, "signature", lambda method: read.append(method) or signature(method))
    for round in range(3):
        calls("on_round_end", trainer="t", round=round, metrics={"m": round})
        fabric.call("on_round_end", trainer="t", round=round, metrics={"m": round})
    assert ours == fabric_calls  # the same calls, in the same order, with the same arguments
    assert ours[:2] == [("recorder", "t", {"m": 0}), ("all", "t", ["metrics", "round"])]
    assert len(read) == 2 + 3 * 3  # ours: once per class with the hook; Fabric's: every callback, every call
    assert calls.listeners("on_round_end") == [ours_callbacks[0], ours_callbacks[2]]
    assert calls.listeners("on_round_start") == []
    calls("on_round_start", trainer="t", round=0)  # no callback has it: nothing is called
    assert len(ours) == 6
