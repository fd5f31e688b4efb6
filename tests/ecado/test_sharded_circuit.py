"""The circuit solve sharded by coordinate: the same steps and states on any number of processes, per-client memory
per process falling as 1 / processes, and the digits configs on two real processes (gloo) with resume."""

import json
import os
import subprocess
import threading
from pathlib import Path

import numpy as np
import pytest
import torch

from lightfed.core.saved_client_states import saved_client_states
from lightfed.core.sharding import CoordinateShards, CoordinateSums
from lightfed.ecado.circuit import Branches, StepControl, integrate_window
from lightfed.strategies import FedECADO
from tests.conftest import LIGHTFED, trainer_options
from tests.ecado.ecado_quadratics import ThreadGroup, dense_quadratics, run_rounds

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("norm", ["max", "rms"])
def test_a_window_integrated_on_two_slices_takes_the_steps_of_the_whole(norm):
    """Every trial's error is reduced over both slices (one all-reduce), so both take the whole vector's steps, with
    the same errors to the last bit."""
    g = torch.Generator().manual_seed(3)
    a, d = 4, 50
    whole = Branches(
        torch.zeros(d, dtype=torch.float64),
        torch.randn(a, d, generator=g, dtype=torch.float64),
        torch.rand(a, generator=g, dtype=torch.float64) + 0.2,
        torch.randn(a, d, generator=g, dtype=torch.float64),
        torch.rand(a, 1, generator=g, dtype=torch.float64) + 0.1,
        torch.rand(a, d, generator=g, dtype=torch.float64) + 0.1,
    )
    control = StepControl(tolerance=1e-3 if norm == "max" else 2e-4, min_step=1e-6, norm=norm)
    expected = integrate_window(whole.start, torch.zeros(d, dtype=torch.float64), whole, 1.0, control)
    group, results = ThreadGroup(2), [None, None]

    def solve(rank: int) -> None:
        part = CoordinateShards(d, 2, rank).local
        branches = Branches(
            whole.start[part],
            whole.deltas[:, part],
            whole.windows,
            whole.couplings[:, part],
            whole.resistance,
            whole.inductance[:, part],
        )
        coordinates = CoordinateSums(d, part, lambda tensor, op: group.all_reduce(rank, tensor, op))
        results[rank] = integrate_window(
            branches.start,
            torch.zeros(part.stop - part.start, dtype=torch.float64),
            branches,
            1.0,
            control,
            coordinates,
        )

    threads = [threading.Thread(target=solve, args=(rank,)) for rank in range(2)]
    [thread.start() for thread in threads]
    [thread.join(timeout=600) for thread in threads]
    assert not any(thread.is_alive() for thread in threads)
    assert expected.rejected > 0 and len(expected.accepted) > 3  # the control did work
    assert results[0].trials == results[1].trials == expected.trials
    assert torch.equal(torch.cat([r.x_c for r in results]), expected.x_c)
    assert torch.equal(torch.cat([r.currents for r in results], dim=1), expected.currents)


def test_a_float32_window_of_ten_clients_on_two_slices_gets_the_bits_of_the_whole():
    """Ten float32 rows and a slice boundary at an odd multiple of 16 coordinates (digits' 29,066 weights on two
    processes): torch's sum over 8 rows or more adds the columns near a slice's end in another order than the same
    columns inside the whole vector, so every sum over the clients is one row at a time (``sum_rows``)."""
    g = torch.Generator().manual_seed(3)
    a, d = 10, 29066
    whole = Branches(
        torch.randn(d, generator=g),
        torch.randn(a, d, generator=g) * 1e-2,
        torch.rand(a, generator=g, dtype=torch.float64) + 0.2,
        torch.randn(a, d, generator=g) * 1e-3,
        torch.rand(a, 1, generator=g) + 0.1,
        torch.rand(a, 1, generator=g) + 0.1,
    )
    frozen = torch.randn(d, generator=g) * 1e-3
    control = StepControl(tolerance=1e-3, min_step=1e-6, norm="rms")
    expected = integrate_window(whole.start, frozen, whole, 0.3, control)
    group, results = ThreadGroup(2), [None, None]
    assert CoordinateShards(d, 2, 0).local.stop % 32 == 16

    def solve(rank: int) -> None:
        part = CoordinateShards(d, 2, rank).local
        branches = Branches(
            whole.start[part].clone(),
            whole.deltas[:, part].contiguous(),
            whole.windows,
            whole.couplings[:, part].contiguous(),
            whole.resistance,
            whole.inductance,
        )
        coordinates = CoordinateSums(d, part, lambda tensor, op: group.all_reduce(rank, tensor, op))
        results[rank] = integrate_window(branches.start, frozen[part].clone(), branches, 0.3, control, coordinates)

    threads = [threading.Thread(target=solve, args=(rank,)) for rank in range(2)]
    [thread.start() for thread in threads]
    [thread.join(timeout=600) for thread in threads]
    assert not any(thread.is_alive() for thread in threads)
    assert len(expected.trials) > 1
    assert results[0].trials == results[1].trials == expected.trials
    assert torch.equal(torch.cat([r.x_c for r in results]), expected.x_c)
    assert torch.equal(torch.cat([r.currents for r in results], dim=1), expected.currents)


def _held_bytes(strategy) -> dict[str, int]:
    """Bytes of the per-client tensors this process holds: vectors and 0-d numbers."""
    held = {"vectors": 0, "numbers": 0}
    for state in strategy.client_states.state_dict().values():
        for value in state.values():
            held["vectors" if value.dim() else "numbers"] += value.numel() * value.element_size()
    return held


def test_per_client_memory_per_process_halves_from_one_to_two_processes():
    problem = dense_quadratics()
    steps, lrs = np.full(20, 3), np.full(20, 0.05)
    held = {}
    for world in (1, 2):
        strategy = FedECADO(inductance=0.3, sensitivity_step=0.05, curvature="diagonal")
        run_rounds(strategy, problem, 8, 5, steps, lrs, torch.zeros(20, dtype=torch.float64), world=world)
        held[world] = [_held_bytes(rank_strategy) for rank_strategy in run_rounds.strategies]
        trained = len(strategy.client_states)
    (one,), two = held[1], held[2]
    assert trained >= 10 and one["vectors"] == trained * 2 * 20 * 8  # current and curvature: d = 20 float64 each
    assert all(rank["vectors"] == one["vectors"] // 2 for rank in two)
    assert all(rank["numbers"] == one["numbers"] for rank in two)  # per-client numbers: 8 bytes each, on every process


@pytest.mark.parametrize("cutoff", [1e-9, 1e3])
def test_the_curvature_cutoff_is_decided_alike_on_every_process(cutoff):
    """The first round's largest share of a conductance is a max over every process's coordinates of the diagonal, so
    both processes decide as one does (estimates on, or off for every later client) and end at its weights."""
    problem = dense_quadratics(seed=2, d=20, n=12)
    steps, lrs = np.full(12, 3), np.full(12, 0.05)
    results, shares = {}, {}
    for world in (1, 2):
        strategy = FedECADO(inductance=0.3, sensitivity_step=0.05, curvature="diagonal", curvature_cutoff=cutoff)
        results[world] = run_rounds(
            strategy, problem, 4, 4, steps, lrs, torch.zeros(20, dtype=torch.float64), world=world
        )
        shares[world] = [(s.curvature_share, s.curvature_negligible) for s in run_rounds.strategies]
    assert shares[2] == shares[1] * 2 and shares[1][0][1] is (cutoff > 1)
    torch.testing.assert_close(results[2], results[1], rtol=0, atol=1e-12)


def _fit(root: Path, config: str, devices: int, *overrides: str) -> Path:
    subprocess.run(
        [
            *LIGHTFED,
            "fit",
            "--config",
            str(Path(config).with_name("base.yaml")),
            "--config",
            config,
            *trainer_options(
                devices=str(devices),
                clients_per_round=10,
                local_epochs=1,
                client_eval_interval=0,
                root_dir=str(root),
                name="run",
                progress_bar="false",
                check_replicas="true",
            ),
            *overrides,
        ],  # every round: the same global weights on every process
        check=True,
        cwd=ROOT,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        timeout=600,
    )
    return root / "run" / "version_0" / "checkpoints" / "last.ckpt"


def _strategy_metrics(checkpoint: Path) -> list[dict[str, float]]:
    """Every round's ``strategy/*`` metrics but the server's seconds."""
    rounds = [json.loads(line) for line in (checkpoint.parents[1] / "metrics.jsonl").read_text().splitlines()]
    return [
        {k: v for k, v in r.items() if k.startswith("strategy/") and k != "strategy/server_seconds"} for r in rounds
    ]


@pytest.mark.parametrize("name", ["fedecado", "adaptive_fedecado"])
@pytest.mark.slow
def test_the_digits_config_on_two_processes_gives_the_weights_of_one(tmp_path, name):
    """Bit-identical: every sum over coordinates (the rms error norm above all) is summed in blocks that do not
    depend on the shard boundaries (``lightfed.core.sharding.CoordinateSums``), every sum over the round's ten clients
    one row at a time (``sum_rows``)."""
    config = str(ROOT / "configs" / "digits" / f"{name}.yaml")
    paths = {
        devices: _fit(tmp_path / f"devices{devices}", config, devices, "--trainer.rounds", "3") for devices in (1, 2)
    }
    one, two = (torch.load(paths[devices], weights_only=False) for devices in (1, 2))
    assert torch.equal(two["params"], one["params"])
    assert two["strategy"] == one["strategy"]  # server step and simulated time
    assert _strategy_metrics(paths[2]) == _strategy_metrics(paths[1])  # the LTEs, norms and mean inductances too
    states = {devices: saved_client_states(path) for devices, path in paths.items()}
    assert states[1].keys() == states[2].keys() and len(states[1]) >= 4
    for client_id, state in states[1].items():
        assert state["current"].numel() == one["params"].numel()
        assert torch.equal(states[2][client_id]["current"], state["current"])
    server = torch.load(paths[2].parent / "process_states" / "round_3" / "process_1_of_2.pt", weights_only=False)
    assert abs(server["server"]["total_current"].numel() - one["params"].numel() / 2) <= 64  # each process about half


@pytest.mark.slow
def test_fedecado_resumed_on_two_processes_gives_the_uninterrupted_weights(tmp_path):
    config = str(ROOT / "configs" / "digits" / "fedecado.yaml")
    straight = torch.load(_fit(tmp_path / "straight", config, 2, "--trainer.rounds", "3"), weights_only=False)
    _fit(tmp_path / "cut", config, 2, "--trainer.rounds", "2")
    resumed = torch.load(
        _fit(tmp_path / "cut", config, 2, "--trainer.rounds", "3", "--ckpt_path", "last"), weights_only=False
    )
    assert torch.equal(resumed["params"], straight["params"])
    assert resumed["strategy"] == straight["strategy"]  # server step and simulated time
