"""SecureAggregation: masked, fixed-point client contributions whose sum is the quantized plain sum exactly."""

from pathlib import Path

import pytest
import torch

from lightfed.core.messages import ClientUpdate
from lightfed.core.seeding import sample_clients
from lightfed.core.sums import Sums
from lightfed.core.transforms import Pipeline, Transform, TransformContext
from lightfed.errors import ConfigError
from lightfed.privacy import SecureAggregation, UserLevelDP
from lightfed.privacy.pairwise_masks import neighbour_graph
from lightfed.privacy.quantization import dequantize_sum, quantize, step_size
from lightfed.strategies import FedAvg, FedBuff
from lightfed.strategies.base import ServerContext, SumsStrategy
from lightfed.strategies.requirements import check_transforms
from tests.conftest import fit_in_subprocess, small_data, small_model, small_trainer, trainer_options
from tests.transforms.pipeline_round import pipeline_round, round_sums, set_up

ROOT = Path(__file__).resolve().parents[2]
SECAGG = ROOT / "configs" / "privacy" / "secagg.yaml"
D = 50


def _update(client_id: int, scale: float = 0.2) -> ClientUpdate:
    delta = torch.randn(D, generator=torch.Generator().manual_seed(client_id)) * scale
    return ClientUpdate(client_id, delta, torch.zeros(0), 10 + client_id, 3, 0.3, torch.zeros(()))


def _set_up(
    secure: SecureAggregation,
    strategy: SumsStrategy | None = None,
    before: list[Transform] | None = None,
    num_clients: int = 12,
    clients_per_round: int = 8,
    rounds: int = 0,
) -> tuple[SumsStrategy, Pipeline]:
    """``strategy`` (FedAvg, uniform weights) behind ``before`` and ``secure``, set up with seed 7."""
    strategy = strategy or FedAvg(weighting="uniform")
    pipeline = set_up(strategy, [*(before or []), secure], torch.zeros(D), num_clients, clients_per_round, 7, rounds)
    return strategy, pipeline


def _round(strategy: SumsStrategy, pipeline: Pipeline, round: int) -> tuple[Sums, torch.Tensor]:
    """The round's reduced sums, every client of its cohort sending ``_update``, and the plain sum of the survivors'
    quantized contributions (each client's sums of the strategy and the transforms before the sealing one)."""
    secure = pipeline.sealer
    assert isinstance(secure, SecureAggregation)
    cohort, _, dropped = secure.protocol(round)
    sums = round_sums(strategy, pipeline, [_update(u) for u in cohort], round)
    unsealed = Pipeline(pipeline.unsealed)  # the same transforms, adding into plain sums
    plain = torch.zeros(secure.clip.numel(), dtype=torch.int64)
    for client_id in cohort:
        if client_id not in dropped:
            contribution = Sums({**strategy.sum_sizes(), **unsealed.sizes}, torch.device("cpu"))
            unsealed.add(contribution, _update(client_id), round, strategy.accumulate)
            plain += secure.quantized(client_id, round, contribution.buffer)
    return sums, plain


@pytest.mark.parametrize("neighbours", [None, 4])
@pytest.mark.parametrize("dropout", [0.0, 0.25])
def test_the_masked_sum_is_the_quantized_plain_sum_bit_for_bit(neighbours, dropout):
    secure = SecureAggregation(neighbours=neighbours, dropout=dropout)
    strategy, pipeline = _set_up(secure)
    for round in range(3):
        sums, plain = _round(strategy, pipeline, round)
        unmasked, survivors = secure.unmasked_sum(sums, round)
        assert survivors == 8 - int(8 * dropout)
        assert torch.equal(unmasked, plain)
        assert not torch.equal(sums["secure_aggregation/masked"].to(torch.int64), plain)  # masks were on the way


def test_the_strategy_aggregates_the_dequantized_sums():
    secure = SecureAggregation(bits=20, dropout=0.25)
    strategy, pipeline = _set_up(secure)
    sums, plain = _round(strategy, pipeline, 0)
    metrics = pipeline.recovered(sums, 0)
    params = strategy.aggregate(torch.zeros(D), sums, 0)
    expected = dequantize_sum(plain, secure.clip, 20, 6)  # [delta sum, weight sum] of the 6 survivors
    assert torch.allclose(params, (expected[:D] / expected[D]).float())
    cohort, _, dropped = secure.protocol(0)
    exact = sum(_update(u).delta for u in cohort if u not in dropped) / 6
    assert torch.allclose(params, exact, atol=step_size(1.0, 20) + 1e-7)  # a mean of errors below one level
    assert metrics["secure_aggregation/dropped"] == 2


def test_no_masked_input_the_server_sees_correlates_with_its_clients_update():
    secure = SecureAggregation(neighbours=2)
    _set_up(secure)
    masked_correlations, plain_correlations = [], []
    for round in range(5):
        for client_id in secure.protocol(round)[0]:
            delta = torch.randn(2000, generator=torch.Generator().manual_seed(100 * round + client_id)) * 0.3
            quantized = quantize(delta.double(), torch.ones(()).double(), 16, None)
            message = secure.client_message(client_id, round, quantized)
            masked_correlations.append(torch.corrcoef(torch.stack([delta.double(), message.double()]))[0, 1])
            plain_correlations.append(torch.corrcoef(torch.stack([delta.double(), quantized.double()]))[0, 1])
    assert len(masked_correlations) == 40
    assert max(abs(float(c)) for c in masked_correlations) < 0.1  # ~N(0, 1/2000): 4.5 standard deviations
    assert min(float(c) for c in plain_correlations) > 0.999


def test_the_quantization_error_is_within_the_bounds_derived_by_hand():
    clip = torch.tensor(1.0, dtype=torch.float64)
    x = torch.tensor([-1.0, -0.5, 0.0, 0.2, 1.0, 3.0], dtype=torch.float64)
    q = quantize(x, clip, 2, None)  # 3 levels of 2/3: (x + 1) * 1.5 = 0, 0.75, 1.5, 1.8, 3, 3 (clipped)
    assert q.tolist() == [0, 1, 2, 2, 3, 3]
    assert torch.allclose(dequantize_sum(q, clip, 2, 1), torch.tensor([-1, -1 / 3, 1 / 3, 1 / 3, 1, 1]).double())
    inside = torch.linspace(-1, 1, 1001, dtype=torch.float64)
    nearest = dequantize_sum(quantize(inside, clip, 4, None), clip, 4, 1) - inside
    assert nearest.abs().max() <= step_size(1.0, 4) / 2 + 1e-12  # half a level of 2/15
    draws = torch.stack(
        [dequantize_sum(quantize(inside, clip, 4, torch.Generator().manual_seed(s)), clip, 4, 1) for s in range(400)]
    )
    assert (draws - inside).abs().max() < step_size(1.0, 4)  # stochastic: below one level ...
    assert (draws.mean(0) - inside).abs().max() < 0.02  # ... and unbiased (std of a mean of 400 <= 0.0067 / 2)


def test_a_round_whose_dropped_clients_cannot_be_unmasked_is_refused():
    secure = SecureAggregation(neighbours=2, dropout=0.5, threshold=1.0)
    _set_up(secure)  # a run of no rounds: nothing to refuse up front
    with pytest.raises(ConfigError, match="cannot unmask round 1.*lower SecureAggregation's dropout"):
        secure.protocol(0)
    with pytest.raises(ConfigError, match="cannot unmask round 1.*lower SecureAggregation's dropout"):
        _set_up(SecureAggregation(neighbours=2, dropout=0.5, threshold=1.0), rounds=1)


def test_the_secagg_plus_graph_is_k_regular_and_symmetric():
    graph = neighbour_graph(list(range(0, 20, 2)), 4, seed=0, round=3)
    assert all(len(neighbours) == 4 for neighbours in graph.values())
    assert all(u in graph[v] for u, neighbours in graph.items() for v in neighbours)


@pytest.mark.parametrize(
    "settings, message",
    [
        (dict(bits=32), "1 <= bits < modulus_bits <= 40"),
        (dict(clip_range=0.0), "clip_range and clip_ranges must be > 0"),
        (dict(neighbours=3), "neighbours must be an even number"),
        (dict(dropout=1.0), "dropout must be in"),
    ],
)
def test_bad_settings_are_refused(settings, message):
    with pytest.raises(ConfigError, match=f"^SecureAggregation's .*{message}"):
        SecureAggregation(**settings)


def test_overflow_of_the_modulus_unknown_sums_and_asynchronous_rounds_are_refused():
    with pytest.raises(ConfigError, match="overflow the modulus 2\\^20: raise SecureAggregation's modulus_bits"):
        _set_up(SecureAggregation(bits=18, modulus_bits=20))
    with pytest.raises(ConfigError, match="clip_ranges names \\['weights'\\], not sums of \\['delta', 'weight'\\]"):
        _set_up(SecureAggregation(clip_ranges={"weights": 100.0}), FedAvg())
    transforms = Pipeline([SecureAggregation()])
    with pytest.raises(ConfigError, match="^transforms: SecureAggregation works on the round's sums: .*, not FedBuff$"):
        check_transforms(FedBuff(), transforms, asynchronous=True)
    strategy, context = FedAvg(), ServerContext(torch.zeros(D), 12, clients_per_round=8, seed=7)
    strategy.setup(context)
    with pytest.raises(ConfigError, match="^SecureAggregation needs synchronous rounds"):
        transforms.setup(TransformContext(context, strategy.sum_sizes()))  # asynchronous: no cohort


def test_it_quantizes_each_of_the_strategys_sums_in_its_own_range():
    secure = SecureAggregation(clip_ranges={"weight": 64.0})
    strategy, pipeline = _set_up(secure, FedAvg())
    sums, plain = _round(strategy, pipeline, 0)
    unmasked, _ = secure.unmasked_sum(sums, 0)
    assert torch.equal(unmasked, plain)
    assert secure.clip[D] == 64.0 and secure.clip[0] == 1.0


def test_it_seals_user_level_dp_whose_clients_add_the_noise_before_quantization():
    """Distributed DP: UserLevelDP's clients add their noise shares in their contribution, inside the masked input;
    the model is UserLevelDP's on the plain sums, up to quantization (8 clients x one level of 8 / (2^24 - 1))."""
    secure = SecureAggregation(bits=24, modulus_bits=40, clip_range=4.0)
    strategy, pipeline = _set_up(secure, FedAvg(), [UserLevelDP(1.0, noise="distributed")])
    sums, plain = _round(strategy, pipeline, 0)
    assert torch.equal(secure.unmasked_sum(sums, 0)[0], plain)
    pipeline.recovered(sums, 0)
    params = strategy.aggregate(torch.zeros(D), sums, 0)

    reference = FedAvg()
    alone = set_up(reference, [UserLevelDP(1.0, noise="distributed")], torch.zeros(D), 12, 8, seed=7)
    updates = [_update(u) for u in secure.protocol(0)[0]]
    expected, _ = pipeline_round(reference, alone, updates, torch.zeros(D), 0)
    assert torch.allclose(params, expected, atol=8 * step_size(4.0, 24))


@pytest.mark.slow
def test_one_and_two_processes_give_the_same_model(tmp_path):
    def params(devices: int) -> torch.Tensor:
        root = tmp_path / f"devices{devices}"
        fit_in_subprocess(
            ROOT / "configs" / "digits" / "base.yaml",
            root,
            devices,
            "--config",
            str(SECAGG),
            *trainer_options(rounds=2, local_steps=2, local_epochs="null", client_eval_interval=0),
            "--transforms.init_args.dropout",
            "0.2",
            "--transforms.init_args.neighbours",
            "4",
        )
        return torch.load(next(root.glob("*/version_0/checkpoints/last.ckpt")), weights_only=True)["params"]

    assert torch.equal(params(1), params(2))


def test_distributed_noise_with_dropouts_is_refused():
    """Each client adds std / sqrt(expected clients): with dropouts their sum falls short of the accounted std."""
    distributed = Pipeline([UserLevelDP(1.0, noise="distributed"), SecureAggregation(dropout=0.25)])
    with pytest.raises(ConfigError, match="^transforms: SecureAggregation drops clients of the round, but UserLevelDP"):
        check_transforms(FedAvg(), distributed, asynchronous=False)
    central = Pipeline([UserLevelDP(1.0), SecureAggregation(dropout=0.25)])
    check_transforms(FedAvg(), central, asynchronous=False)  # central noise: the server adds all of it


def test_its_parties_are_the_clients_the_run_samples_not_the_unseen_ones(tmp_path):
    """Two of 8 clients unseen (never sampled: the last ids): each round's parties are the 4 clients that train in it,
    drawn from the other 6 (a party without a masked input, or a masked input from another client, is refused)."""
    secure = SecureAggregation(clip_range=4.0)
    trainer = small_trainer(tmp_path, rounds=2, clients_per_round=4, unseen_clients=2, client_eval_interval=0)
    trainer.fit(small_model(momentum=0.0), small_data(), FedAvg(weighting="uniform"), transforms=[secure])
    assert [secure.protocol(round)[0] for round in range(2)] == [sample_clients(0, r, 6, 4) for r in range(2)]
