"""Counts the collectives each process of a run calls, round by round (torch.distributed's, once per outermost call)."""

import functools
import json
import os
import threading
from pathlib import Path

import torch.distributed

from lightfed.callbacks import Callback

COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "all_gather_object",
    "all_gather_into_tensor",
    "broadcast",
    "broadcast_object_list",
    "barrier",
    "monitored_barrier",
    "all_to_all",
    "all_to_all_single",
    "reduce",
    "reduce_scatter",
    "gather",
    "gather_object",
    "scatter",
    "scatter_object_list",
)


class CountCollectives(Callback):
    """Writes ``collectives_rank<r>.json`` under ``$LIGHTFED_TEST_PROBE``: the names of the collectives of each round,
    from the start of a round to the start of the next (its evaluation and checkpoint included)."""

    def setup(self, trainer, data) -> None:
        self.calls: list[str] = []
        self.rounds: list[list[str]] = []
        self._mark = 0
        inside = threading.local()
        for name in COLLECTIVES:
            original = getattr(torch.distributed, name)

            @functools.wraps(original)
            def counted(*args, _original=original, _name=name, **kwargs):
                if getattr(inside, "depth", 0) == 0:
                    self.calls.append(_name)
                inside.depth = getattr(inside, "depth", 0) + 1
                try:
                    return _original(*args, **kwargs)
                finally:
                    inside.depth -= 1

            setattr(torch.distributed, name, counted)

    def on_round_start(self, trainer, round: int) -> None:
        if round > 0:
            self.rounds.append(self.calls[self._mark :])
        self._mark = len(self.calls)

    def on_fit_end(self, trainer, metrics) -> None:
        path = Path(os.environ["LIGHTFED_TEST_PROBE"]) / f"collectives_rank{trainer.fabric.global_rank}.json"
        path.write_text(json.dumps(self.rounds))
