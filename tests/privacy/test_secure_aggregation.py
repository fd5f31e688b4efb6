"""SecureAggregation: masked, fixed-point client contributions whose sum is the quantized plain sum exactly."""

from pathlib import Path

import pytest
import torch

from lightfed.core.messages import ClientPlan, ClientUpdate
from lightfed.core.sums import Sums
from lightfed.errors import ConfigError
from lightfed.privacy import SecureAggregation, UserLevelDP
from lightfed.privacy.pairwise_masks import neighbour_graph
from lightfed.privacy.quantization import dequantize_sum, quantize, step_size
from lightfed.strategies import FedAvg, FedBuff, ServerContext
from tests.conftest import fit_in_subprocess, trainer_options

ROOT = Path(__file__).resolve().parents[2]
SECAGG = ROOT / "configs" / "privacy" / "secagg.yaml"
D = 50


def _update(client_id: int, scale: float = 0.2) -> ClientUpdate:
    delta = torch.randn(D, generator=torch.Generator().manual_seed(client_id)) * scale
    return ClientUpdate(client_id, delta, torch.zeros(0), 10 + client_id, 3, 0.3, torch.zeros(()))


def _set_up(strategy: SecureAggregation, num_clients: int = 12, clients_per_round: int = 8) -> SecureAggregation:
    strategy.setup(ServerContext(torch.zeros(D), num_clients, clients_per_round=clients_per_round, seed=7))
    return strategy


def _round(strategy: SecureAggregation, round: int) -> tuple[Sums, torch.Tensor]:
    """The round's reduced sums, and the plain sum of the survivors' quantized contributions."""
    sums = Sums(strategy.sum_sizes(), torch.device("cpu"))
    cohort, _, dropped = strategy.protocol(round)
    plain = torch.zeros(strategy.clip.numel(), dtype=torch.int64)
    for client_id in cohort:
        strategy.configure_client(ClientPlan(client_id, round, seed=0))
        strategy.accumulate(sums, update := _update(client_id))
        if client_id not in dropped:
            plain += strategy.quantized(client_id, strategy.contribution(update).clone())
    return sums, plain


@pytest.mark.parametrize("neighbours", [None, 4])
@pytest.mark.parametrize("dropout", [0.0, 0.25])
def test_the_masked_sum_is_the_quantized_plain_sum_bit_for_bit(neighbours, dropout):
    strategy = _set_up(SecureAggregation(FedAvg(weighting="uniform"), neighbours=neighbours, dropout=dropout))
    for round in range(3):
        sums, plain = _round(strategy, round)
        unmasked, survivors = strategy.unmasked_sum(sums, round)
        assert survivors == 8 - int(8 * dropout)
        assert torch.equal(unmasked, plain)
        assert not torch.equal(sums["secure_aggregation/masked"].to(torch.int64), plain)  # masks were on the way


def test_the_inner_strategy_aggregates_the_dequantized_sums():
    strategy = _set_up(SecureAggregation(FedAvg(weighting="uniform"), bits=20, dropout=0.25))
    sums, plain = _round(strategy, 0)
    params = strategy.aggregate(torch.zeros(D), sums, 0)
    expected = dequantize_sum(plain, strategy.clip, 20, 6)  # [delta sum, weight sum] of the 6 survivors
    assert torch.allclose(params, (expected[:D] / expected[D]).float())
    cohort, _, dropped = strategy.protocol(0)
    exact = sum(_update(u).delta for u in cohort if u not in dropped) / 6
    assert torch.allclose(params, exact, atol=step_size(1.0, 20) + 1e-7)  # a mean of errors below one level
    assert strategy.metrics()["secure_aggregation/dropped"] == 2


def test_no_masked_input_the_server_sees_correlates_with_its_clients_update():
    strategy = _set_up(SecureAggregation(FedAvg(weighting="uniform"), neighbours=2))
    masked_correlations, plain_correlations = [], []
    for round in range(5):
        for client_id in strategy.protocol(round)[0]:
            strategy.configure_client(ClientPlan(client_id, round, seed=0))
            delta = torch.randn(2000, generator=torch.Generator().manual_seed(100 * round + client_id)) * 0.3
            quantized = quantize(delta.double(), torch.ones(()).double(), 16, None)
            message = strategy.client_message(client_id, quantized)
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
    strategy = _set_up(SecureAggregation(FedAvg(), neighbours=2, dropout=0.5, threshold=1.0))
    with pytest.raises(ConfigError, match="cannot unmask round 1.*lower strategy.dropout"):
        strategy.protocol(0)


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
    with pytest.raises(ConfigError, match=message):
        SecureAggregation(FedAvg(), **settings)


def test_overflow_of_the_modulus_and_unknown_sums_are_refused():
    with pytest.raises(ConfigError, match="overflow the modulus 2\\^20: raise strategy.modulus_bits"):
        _set_up(SecureAggregation(FedAvg(), bits=18, modulus_bits=20))
    with pytest.raises(ConfigError, match="clip_ranges names \\['weights'\\], not sums of FedAvg"):
        _set_up(SecureAggregation(FedAvg(), clip_ranges={"weights": 100.0}))
    with pytest.raises(ConfigError, match="wraps a strategy of the sums path"):
        SecureAggregation(FedBuff())


def test_it_quantizes_each_of_the_inner_strategys_sums_in_its_own_range():
    strategy = _set_up(SecureAggregation(FedAvg(), clip_ranges={"weight": 64.0}))
    sums, plain = _round(strategy, 0)
    unmasked, _ = strategy.unmasked_sum(sums, 0)
    assert torch.equal(unmasked, plain)
    assert strategy.clip[D] == 64.0 and strategy.clip[0] == 1.0


def test_it_carries_user_level_dp_whose_clients_add_the_noise_before_quantization():
    """Distributed DP: UserLevelDP's clients add their noise shares in ``accumulate``, inside the masked input; the
    model is UserLevelDP's on the plain sums, up to quantization (8 clients x one level of 8 / (2^24 - 1))."""
    secure = _set_up(
        SecureAggregation(UserLevelDP(FedAvg(), 1.0, noise="distributed"), bits=24, modulus_bits=40, clip_range=4.0)
    )
    sums, plain = _round(secure, 0)
    assert torch.equal(secure.unmasked_sum(sums, 0)[0], plain)
    params = secure.aggregate(torch.zeros(D), sums, 0)

    reference = UserLevelDP(FedAvg(), 1.0, noise="distributed")
    reference.setup(ServerContext(torch.zeros(D), 12, clients_per_round=8, seed=7))
    reference_sums = Sums(reference.sum_sizes(), torch.device("cpu"))
    for client_id in secure.protocol(0)[0]:
        reference.configure_client(ClientPlan(client_id, 0, seed=0))
        reference.accumulate(reference_sums, _update(client_id))
    expected = reference.aggregate(torch.zeros(D), reference_sums, 0)
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
            "--strategy.init_args.dropout",
            "0.2",
            "--strategy.init_args.neighbours",
            "4",
        )
        return torch.load(next(root.glob("*/version_0/checkpoints/last.ckpt")), weights_only=True)["params"]

    assert torch.equal(params(1), params(2))


def test_distributed_noise_with_dropouts_is_refused():
    """Each client adds std / sqrt(expected clients): with dropouts their sum falls short of the accounted std."""
    with pytest.raises(ConfigError, match="dropout 0.25 leaves the distributed noise short"):
        SecureAggregation(UserLevelDP(FedAvg(), 1.0, noise="distributed"), dropout=0.25)
    SecureAggregation(UserLevelDP(FedAvg(), 1.0), dropout=0.25)  # central noise: the server adds all of it


def test_the_cohort_is_drawn_from_the_clients_the_run_samples_not_the_unseen_ones():
    from lightfed.core.seeding import sample_clients

    strategy = SecureAggregation(FedAvg(weighting="uniform"))
    strategy.setup(ServerContext(torch.zeros(D), 20, clients_per_round=5, seed=7, sampled_clients=16))
    assert all(strategy.cohort(round) == sample_clients(7, round, 16, 5) for round in range(10))
