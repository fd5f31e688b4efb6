"""Callbacks observe: they read the trainer's documented surface (``TrainerState``) and call none of its methods."""

import ast
import inspect
from pathlib import Path

import lightfed.callbacks
from lightfed.asynchronous.buffered_rounds import AsyncTrainerState, VirtualTimeLogging
from lightfed.callbacks import TrainerState
from lightfed.strategies import FedAvg
from tests.conftest import small_data, small_model, small_trainer

CALLBACKS = Path(lightfed.callbacks.__file__).parent


def surface(protocol: type) -> set[str]:
    """The names a Protocol declares: its annotated attributes and its properties, its bases' too."""
    names: set[str] = set()
    for cls in protocol.__mro__:
        names |= set(getattr(cls, "__annotations__", {}))
        names |= {name for name, value in vars(cls).items() if isinstance(value, property)}
    return names


def uses_of_trainer(source: str) -> list[tuple[str, bool]]:
    """Each ``trainer.<name>`` in ``source``, and whether it is called (``trainer.<name>(...)``)."""
    tree = ast.parse(source)
    called = {id(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
    return [
        (node.attr, id(node) in called)
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "trainer"
    ]


def test_the_built_in_callbacks_read_only_the_documented_surface_and_call_no_trainer_method():
    sources = [path.read_text() for path in CALLBACKS.glob("*.py")]
    uses = [use for source in sources for use in uses_of_trainer(source)]
    uses += uses_of_trainer(inspect.getsource(VirtualTimeLogging))
    assert uses and not [name for name, called in uses if called]
    assert {name for name, _ in uses} <= surface(AsyncTrainerState)


def test_the_scan_sees_a_callback_that_calls_back_into_the_trainer():
    source = (
        "def on_round_end(self, trainer, round, metrics):\n    trainer.save_checkpoint()\n    trainer.fabric.print(1)\n"
    )
    assert uses_of_trainer(source) == [("save_checkpoint", True), ("fabric", False)]


def test_the_trainer_has_every_name_of_its_surface(tmp_path):
    trainer = small_trainer(tmp_path, rounds=1)
    trainer.fit(small_model(), small_data(), FedAvg())
    assert {"fabric", "round", "should_stop", "loggers", "checkpoint_path"} <= surface(TrainerState)
    assert all(hasattr(trainer, name) for name in surface(TrainerState))
