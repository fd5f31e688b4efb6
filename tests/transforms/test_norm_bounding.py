"""NormBounding as a transform: each client's delta clipped in L2 before any strategy takes it, the sharded path's
Krum included; the pipeline's order; no trainer."""

import pytest
import torch

from lightfed.cli import run
from lightfed.core.messages import ClientUpdate
from lightfed.core.server_context import ServerContext
from lightfed.core.sums import Sums
from lightfed.core.transforms import Pipeline, Transform, TransformContext
from lightfed.errors import ConfigError
from lightfed.strategies import FedAvg, Krum
from lightfed.transforms import NormBounding
from tests.conftest import trainer_options
from tests.run.fake_training import engine_round
from tests.test_run_identity import TINY


def _update(client_id: int, delta: list[float], examples: int = 10) -> ClientUpdate:
    return ClientUpdate(client_id, torch.tensor(delta), torch.zeros(0), examples, 1, 0.1, torch.tensor(0.0))


def _sent(pipeline: Pipeline, updates: list[ClientUpdate], sums: Sums) -> list[ClientUpdate]:
    """What reaches the strategy of each update sent through ``pipeline`` (in round 0)."""
    sent: list[ClientUpdate] = []
    for update in updates:
        pipeline.add(sums, update, 0, lambda _, update: sent.append(update))
    return sent


def _set_up(pipeline: Pipeline) -> Pipeline:
    pipeline.setup(TransformContext(ServerContext(torch.zeros(3), num_clients=2), {}))
    return pipeline


def test_a_delta_longer_than_max_norm_is_scaled_to_it_and_the_clipped_fraction_comes_from_the_sums():
    pipeline = _set_up(Pipeline([NormBounding(max_norm=1.0)]))
    sums = Sums(pipeline.sizes, torch.device("cpu"))
    long, short = _update(0, [3.0, 4.0, 0.0]), _update(1, [0.3, 0.4, 0.0])
    sent = _sent(pipeline, [long, short], sums)
    assert torch.allclose(sent[0].delta, torch.tensor([0.6, 0.8, 0.0]))  # norm 5 -> 1
    assert sent[1].delta is short.delta  # within the bound: sent as trained
    assert pipeline.recovered(sums, 0) == {"norm_bounding/clipped_fraction": 0.5}


def test_client_halves_run_in_order_and_server_halves_in_reverse():
    calls = []

    class Record(Transform):
        def __init__(self, name: str) -> None:
            self.name = name

        def contribution(self, update, round, sums):
            calls.append(f"client {self.name}")
            return update

        def recovered(self, sums, round):
            calls.append(f"server {self.name}")

    pipeline = _set_up(Pipeline([Record("a"), Record("b")]))
    sums = Sums({}, torch.device("cpu"))
    _sent(pipeline, [_update(0, [1.0])], sums)
    pipeline.recovered(sums, 0)
    assert calls == ["client a", "client b", "server b", "server a"]


def test_two_transforms_adding_into_the_same_sums_are_refused_in_one_line():
    with pytest.raises(ConfigError, match=r"norm_bounding adds into sums already added into: \['norm_bounding/"):
        _set_up(Pipeline([NormBounding(1.0), NormBounding(2.0)]))
    with pytest.raises(ConfigError, match="max_norm must be > 0, got 0"):
        NormBounding(0)


def test_norm_bounding_in_front_of_krum_gives_the_hand_computed_pick():
    """Two benign clients near the origin, three larger deltas along x. Krum (f = 1, n = 5: each delta scored by its
    n - f - 2 = 2 nearest) alone picks [10.5, 0] (score 0.25 + 0.25); bounded to norm 1 the three become [1, 0]
    (score 0), so Krum picks [1, 0]."""
    deltas = [[0.1, 0.0], [0.15, 0.0], [10.0, 0.0], [10.5, 0.0], [11.0, 0.0]]
    params = torch.tensor([1.0, -1.0])
    alone = engine_round(Krum(num_byzantine=1), params, deltas)
    bounded = engine_round(Krum(num_byzantine=1), params, deltas, [NormBounding(max_norm=1.0)])
    assert torch.allclose(alone.params, params + torch.tensor([10.5, 0.0]))
    assert torch.allclose(bounded.params, params + torch.tensor([1.0, 0.0]))
    assert bounded.metrics["norm_bounding/clipped_fraction"] == pytest.approx(0.6)


def test_norm_bounding_in_front_of_fedavg_weights_the_bounded_deltas_by_examples():
    params = torch.tensor([1.0, 2.0, 3.0])  # [3, 4, 0] (10 examples) -> [0.6, 0.8, 0]; [0.3, 0.4, 0] (30) as is
    result = engine_round(FedAvg(), params, [[3.0, 4.0, 0.0], [0.3, 0.4, 0.0]], [NormBounding(1.0)], [10, 30])
    assert torch.allclose(result.params, params + torch.tensor([0.375, 0.5, 0.0]))


def test_a_config_lists_transforms_and_a_bound_no_delta_reaches_leaves_fedavg_bit_for_bit(tmp_path):
    config = tmp_path / "tiny.yaml"
    config.write_text(TINY)
    weights = {}
    for name, transforms in [("plain", "[]"), ("wide", BOUND.format(1e9)), ("tight", BOUND.format(1e-3))]:
        metrics = run(
            [
                "fit",
                "--config",
                str(config),
                *trainer_options(root_dir=str(tmp_path), name=name),
                "--transforms",
                transforms,
            ]
        )
        checkpoint = torch.load(tmp_path / name / "version_0" / "checkpoints" / "last.ckpt", weights_only=False)
        weights[name] = checkpoint["params"]
        if name != "plain":
            assert metrics["norm_bounding/clipped_fraction"] == (1.0 if name == "tight" else 0.0)
    assert torch.equal(weights["plain"], weights["wide"]) and not torch.equal(weights["plain"], weights["tight"])


BOUND = '[{{"class_path": "lightfed.transforms.NormBounding", "init_args": {{"max_norm": {}}}}}]'
