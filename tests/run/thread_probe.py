"""Writes, from each process of a run, the torch threads it trains with (``tests/run/test_cores.py``)."""

import json
import os
from pathlib import Path

import torch

from lightfed.callbacks import Callback


class RecordThreads(Callback):
    def on_round_start(self, trainer, round):
        record = {"threads": torch.get_num_threads(), "omp": os.environ.get("OMP_NUM_THREADS")}
        folder = Path(os.environ["LIGHTFED_TEST_PROBE"])
        (folder / f"rank_{trainer.fabric.global_rank}.json").write_text(json.dumps(record))
