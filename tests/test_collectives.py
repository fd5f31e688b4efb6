"""The collectives of a FedAvg round on 2 processes, counted: each is a wait every round pays, so a new one fails here."""

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import quickstart_command

ROOT = Path(__file__).resolve().parents[1]

FABRIC_ALL_REDUCE = ["barrier", "all_reduce"]  # Lightning's Fabric.all_reduce waits in a barrier first
ROUND = [
    *FABRIC_ALL_REDUCE,  # the round's sums, the bookkeeping and the stop request with them (the round engine)
    "all_gather_object",  # what the clients' modules logged: its names,
    *FABRIC_ALL_REDUCE,  # then its values
    "all_gather_object",  # what the validation pass logged: its names,
    *FABRIC_ALL_REDUCE,  # then its values
    *["barrier", "all_gather", "all_gather"] * 4,  # torchmetrics syncs the validation accuracy's four states
    "barrier",  # the checkpoint: every process waits until process 0 has written last.ckpt
]


@pytest.mark.slow
def test_a_fedavg_round_on_two_processes_makes_the_counted_collectives(tmp_path):
    """Round 2 of 3 of the quickstart (evaluated and checkpointed, no per-client evaluation), on each process:
    torch.distributed's calls from the start of the round to the start of the next."""
    subprocess.run(
        quickstart_command(
            tmp_path, 2, "--trainer.callbacks+=tests.collective_counter.CountCollectives", rounds=3, logger="false"
        ),
        check=True,
        cwd=tmp_path,
        capture_output=True,
        timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "LIGHTFED_TEST_PROBE": str(tmp_path)},
    )
    for rank in (0, 1):
        rounds = json.loads((tmp_path / f"collectives_rank{rank}.json").read_text())
        assert rounds[1] == ROUND
    assert len(ROUND) == 21
