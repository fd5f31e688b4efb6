import os
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from lightfed.core.local_rule import LocalRule
from lightfed.core.saved_client_states import saved_client_states
from lightfed.core.sharding import CoordinateShards
from lightfed.errors import ConfigError
from lightfed.strategies import CoordinateMedian, TrimmedMean
from lightfed.strategies.robust import trimmed_mean
from lightfed.strategies.sharded_base import ShardedRound
from tests.conftest import LIGHTFED, small_data, small_model, small_trainer, trainer_options

ROOT = Path(__file__).resolve().parents[2]
DELTAS = torch.tensor([[1.0, -4.0], [100.0, 2.0], [3.0, 0.0], [2.0, -100.0], [5.0, 1.0]])


def _round(deltas: torch.Tensor) -> ShardedRound:
    count = torch.ones(len(deltas), dtype=torch.float64)
    return ShardedRound(0, list(range(len(deltas))), deltas, count, count, count, 0 * count, {}, lambda t, op: t)


def test_trimmed_mean_and_median_by_hand():
    # column 0 sorted: 1 2 3 5 100; column 1 sorted: -100 -4 0 1 2
    assert torch.equal(trimmed_mean(DELTAS, 1), torch.tensor([(2 + 3 + 5) / 3, (-4 + 0 + 1) / 3]))
    assert torch.equal(trimmed_mean(DELTAS, 0), DELTAS.double().mean(0).float())
    median = CoordinateMedian(server_lr=0.5)
    assert torch.equal(median.aggregate_shard(torch.ones(2), _round(DELTAS)), torch.tensor([1 + 0.5 * 3, 1 + 0.5 * 0]))
    # an even number of clients: the mean of the middle two (column 0: 1 2 3 100 -> 2.5; column 1: -100 -4 0 2 -> -2)
    assert torch.equal(
        median.aggregate_shard(torch.zeros(2), _round(DELTAS[:4])), torch.tensor([0.5 * 2.5, 0.5 * -2.0])
    )
    # a trim of 0.2 of 5 clients cuts one at each end
    assert torch.equal(TrimmedMean(trim=0.2).aggregate_shard(torch.zeros(2), _round(DELTAS)), trimmed_mean(DELTAS, 1))


@pytest.mark.parametrize("trim", [-0.1, 0.5])
def test_a_trim_outside_zero_to_a_half_is_refused(trim):
    with pytest.raises(ConfigError, match=r"strategy.trim must be in \[0, 0.5\)"):
        TrimmedMean(trim=trim)


def test_coordinate_shards_cover_every_coordinate_once():
    for size, world in [(10, 3), (2, 4), (7, 1)]:
        shards = [CoordinateShards(size, world, rank).local for rank in range(world)]
        assert torch.equal(torch.cat([torch.arange(size)[s] for s in shards]), torch.arange(size))
    assert CoordinateShards(10, 3, 0).lengths == [4, 4, 2]


def test_the_median_trains_through_the_sharded_path_on_one_process(tmp_path):
    metrics = small_trainer(tmp_path, rounds=2).fit(small_model(), small_data(), CoordinateMedian())
    assert metrics["round/clients"] == 4 and 0.1 < metrics["val_acc"] <= 1


@pytest.mark.slow
def test_one_and_two_processes_give_the_same_model_and_client_states(tmp_path):
    """Through the real command: with two processes each owns half the coordinates of every client's delta (one
    all-to-all), computes the median of its half and keeps its half of every client's state; the gathered model and
    the checkpoint's whole per-client vectors are those of one process, bit for bit."""

    def checkpoint(devices: int) -> dict:
        root = tmp_path / f"devices{devices}"
        subprocess.run(
            [
                *LIGHTFED,
                "fit",
                "--config",
                str(ROOT / "configs" / "quickstart.yaml"),
                "--strategy",
                "tests.strategies.sharded_memory.MedianRememberingDeltas",
                *trainer_options(
                    rounds=2,
                    client_eval_interval=0,
                    devices=str(devices),
                    root_dir=str(root),
                    progress_bar="false",
                    check_replicas="true",
                ),
            ],
            check=True,
            cwd=ROOT,
            capture_output=True,
            timeout=600,
            env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)},
        )
        path = root / "quickstart" / "version_0" / "checkpoints" / "last.ckpt"
        return {**torch.load(path, weights_only=False), "client_states": saved_client_states(path)}

    one, two = checkpoint(1), checkpoint(2)
    assert one["round"] == two["round"] == 2
    assert torch.equal(one["params"], two["params"]) and torch.equal(one["buffers"], two["buffers"])
    assert one["client_states"].keys() == two["client_states"].keys() and len(one["client_states"]) >= 10
    for client_id, state in one["client_states"].items():
        assert state["delta"].numel() == one["params"].numel()
        assert torch.equal(state["delta"], two["client_states"][client_id]["delta"])
        assert state["examples"] == two["client_states"][client_id]["examples"] > 0


class _Marker(LocalRule):
    """Reports a vector of ones in even rounds and nothing in odd ones."""

    def __init__(self, round: int) -> None:
        self.round = round

    def adjust(self, grad: torch.Tensor, params: torch.Tensor) -> None:
        pass

    def report(self) -> dict:
        return {"marker": torch.ones(self.size)} if self.round % 2 == 0 else {}

    def start(self, params: torch.Tensor, context) -> None:
        self.size = params.numel()


class _MedianSeeingMarkers(CoordinateMedian):
    report_vectors = ("marker",)

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[torch.Tensor] = []

    def configure_client(self, plan, received=None):
        return replace(plan, rule=_Marker(plan.round))

    def aggregate_shard(self, params: torch.Tensor, updates: ShardedRound) -> torch.Tensor:
        self.seen.append(updates.reports["marker"].clone())
        return super().aggregate_shard(params, updates)


def test_a_vector_a_client_does_not_report_arrives_as_zeros_in_every_round(tmp_path):
    """The rows of the round's deltas and vectors are kept from round to round: an unreported vector must not show
    the previous round's."""
    strategy = _MedianSeeingMarkers()
    small_trainer(tmp_path, rounds=3).fit(small_model(), small_data(), strategy)
    assert [bool((seen == 1).all()) for seen in strategy.seen] == [True, False, True]
    assert not strategy.seen[1].any()
