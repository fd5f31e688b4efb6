"""UserLevelDP: DP-FedAvg's clipping and noise as configured, epsilon as Opacus' accountants give it, adaptive clipping,
the same model on 1 and 2 processes, epsilon across a resume and the budget's stop."""

import math
from pathlib import Path

import pytest
import torch
from opacus.accountants import PRVAccountant, RDPAccountant

from lightfed.core.messages import ClientPlan, ClientUpdate
from lightfed.core.sums import DELTA, WEIGHT, Sums
from lightfed.core.transforms import Pipeline, TransformContext
from lightfed.errors import ConfigError
from lightfed.privacy import DPSGD, UserLevelDP
from lightfed.privacy.user_level import UNCLIPPED
from lightfed.strategies import AdaptFed, FedAdam, FedAvg, FedECADO, FedExP, FedNova, Scaffold
from lightfed.strategies.base import ServerContext, SumsStrategy
from lightfed.strategies.requirements import check_requirements, check_transforms
from tests.conftest import same_weights_on_two_processes, small_data, small_model, small_trainer, trainer_options
from tests.transforms.pipeline_round import pipeline_round, round_sums, set_up

ROOT = Path(__file__).resolve().parents[2]


def _update(client_id, delta):
    return ClientUpdate(
        client_id, torch.as_tensor(delta, dtype=torch.float32), torch.zeros(0), 10, 1, 0.1, torch.tensor(0.0)
    )


class _DP:
    """UserLevelDP with ``settings`` in front of ``strategy`` (FedAvg), set up for a run of ``clients_per_round`` of
    ``num_clients`` clients; ``round`` runs one round, after which ``metrics`` holds the transforms' metrics."""

    def __init__(self, params, num_clients=4, clients_per_round=2, strategy: SumsStrategy | None = None, **settings):
        self.transform, self.strategy = UserLevelDP(**settings), strategy or FedAvg()
        self.pipeline = set_up(self.strategy, [self.transform], params, num_clients, clients_per_round)
        self.metrics: dict[str, float] = {}

    def round(self, deltas, params, round=0):
        """The next params after round ``round`` in which client i sends ``deltas[i]``."""
        updates = [_update(client_id, delta) for client_id, delta in enumerate(deltas)]
        params, self.metrics = pipeline_round(self.strategy, self.pipeline, updates, params, round)
        return params


def _poisson(clients_per_round, noise_multiplier):
    """Poisson sampling of 1000 clients at rate 0.1, with ``trainer.clients_per_round`` ``clients_per_round``."""
    return _DP(
        torch.zeros(2),
        num_clients=1000,
        clients_per_round=clients_per_round,
        noise_multiplier=noise_multiplier,
        sampling="poisson",
        sample_rate=0.1,
    )


def test_each_delta_is_clipped_to_c_and_the_sum_divided_by_the_clients_per_round():
    x = torch.tensor([1.0, 2.0, 3.0])
    dp = _DP(x, noise_multiplier=0.0, clip=1.0)
    # [3, 4, 0] (norm 5) -> [0.6, 0.8, 0]; [0.3, 0.4, 0] (norm 0.5) is kept; unweighted, over the 2 clients per round
    new = dp.round([[3.0, 4.0, 0.0], [0.3, 0.4, 0.0]], x)
    assert torch.allclose(new, x + torch.tensor([0.45, 0.6, 0.0]))
    assert dp.metrics == {"user_level_dp/clip": 1.0}  # no noise: no epsilon to report (fixed clip: no fraction)


@pytest.mark.parametrize(
    "target_quantile, count_stddev, multiplier",
    [
        (None, None, 0.5),  # fixed clipping: noise_multiplier x C
        (0.5, 0.5, (0.5**-2 - 1.0**-2) ** -0.5),  # adaptive: the update's share of the privacy, Andrew et al.
    ],
)
def test_the_noise_on_the_sum_has_std_noise_multiplier_times_c(target_quantile, count_stddev, multiplier):
    d, clip = 40_000, 2.0
    dp = _DP(
        torch.zeros(d), noise_multiplier=0.5, clip=clip, target_quantile=target_quantile, count_stddev=count_stddev
    )
    assert dp.transform.update_std() == pytest.approx(multiplier * clip, rel=1e-12)
    mean = dp.round([torch.zeros(d), torch.zeros(d)], torch.zeros(d))  # the noise alone, over 2 clients
    noise = mean.double() * 2
    assert float(noise.std()) == pytest.approx(multiplier * clip, rel=0.02)  # the estimate's own error: 0.4 %
    assert abs(float(noise.mean())) < 0.02 * multiplier * clip


def test_the_noise_seed_changes_the_noise_and_nothing_else():
    """noise_seed None draws the noise from trainer.seed (0 here); another seed draws other noise of the same std;
    the Poisson coins stay trainer.seed's (an audit's shadow runs sample as their target does)."""
    zeros = [torch.zeros(1000), torch.zeros(1000)]
    noise = {
        seed: _DP(torch.zeros(1000), noise_multiplier=1.0, noise_seed=seed).round(zeros, torch.zeros(1000))
        for seed in (None, 0, 7)
    }
    assert torch.equal(noise[None], noise[0]) and not torch.equal(noise[0], noise[7])
    assert float((noise[7] * 2).std()) == pytest.approx(1.0, rel=0.1)
    drawn = []
    for seed in (None, 7):
        dp = _DP(torch.zeros(2), 1000, 1000, noise_multiplier=1.0, sampling="poisson", sample_rate=0.1, noise_seed=seed)
        plans = [
            dp.pipeline.plan(dp.strategy.configure_client(ClientPlan(i, 0, seed=0, epochs=1))) for i in range(1000)
        ]
        drawn.append([plan.client_id for plan in plans if plan.steps != 0])
    assert drawn[0] == drawn[1] and 70 < len(drawn[0]) < 130


@pytest.mark.parametrize("accountant, opacus_accountant", [("rdp", RDPAccountant), ("prv", PRVAccountant)])
def test_epsilon_after_r_rounds_is_opacus_accountant_with_the_same_rate_noise_and_steps(accountant, opacus_accountant):
    dp = _DP(torch.zeros(3), num_clients=8, clients_per_round=2, noise_multiplier=1.3, accountant=accountant)
    reference = opacus_accountant()
    for round in range(3):
        dp.round([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], torch.zeros(3), round)
        reference.step(noise_multiplier=1.3, sample_rate=2 / 8)
        assert dp.metrics["user_level_dp/epsilon"] == pytest.approx(reference.get_epsilon(delta=1e-5), rel=1e-9)


def test_adaptive_clipping_converges_to_the_target_quantile_of_the_update_norms():
    """Update norms log-normal(0, 1): the 0.3 quantile is exp(-0.5244) = 0.592; from a clip of 0.1, 100 clients a
    round, count noise std 5 (clients / 20)."""
    generator = torch.Generator().manual_seed(0)
    dp = _DP(
        torch.zeros(1), num_clients=100, clients_per_round=100, noise_multiplier=1.0, clip=0.1, target_quantile=0.3
    )
    clips = []
    for round in range(150):
        norms = torch.randn(100, generator=generator).exp()
        dp.round([[float(n)] for n in norms], torch.zeros(1), round)
        clips.append(dp.metrics["user_level_dp/clip"])
    quantile = math.exp(-0.5244)
    assert clips[0] == 0.1 and sum(clips[-50:]) / 50 == pytest.approx(quantile, rel=0.1)


def test_poisson_sampling_draws_each_client_with_the_sample_rate_and_the_others_take_no_step():
    dp = _poisson(clients_per_round=1000, noise_multiplier=0.0)
    plans = [dp.pipeline.plan(dp.strategy.configure_client(ClientPlan(i, 0, seed=0, epochs=2))) for i in range(1000)]
    drawn = [plan for plan in plans if plan.steps != 0]
    assert 70 < len(drawn) < 130 and all(plan.epochs == 2 for plan in drawn)
    sums = Sums({**dp.strategy.sum_sizes(), **dp.pipeline.sizes}, torch.device("cpu"))
    for plan in plans:
        dp.pipeline.add(sums, _update(plan.client_id, [0.5, 0.0]), 0, dp.strategy.accumulate)
    assert float(sums[DELTA][0]) == 0.5 * len(drawn)  # the clients not drawn add nothing
    assert float(sums[WEIGHT]) == len(drawn)  # weight 1 each
    assert dp.transform.expected == 100  # the denominator: q N, not the number drawn
    with pytest.raises(ConfigError, match="set trainer.clients_per_round to 1000, got 10"):
        _poisson(clients_per_round=10, noise_multiplier=1.0)


def test_distributed_noise_is_added_by_the_clients_and_sums_to_the_same_std():
    d = 40_000
    dp = _DP(torch.zeros(d), num_clients=8, clients_per_round=4, noise_multiplier=0.5, clip=2.0, noise="distributed")
    share = dp.transform.contribution(_update(0, torch.zeros(d)), 0, Sums(dp.pipeline.sizes, torch.device("cpu")))
    assert float(share.delta.std()) == pytest.approx(0.5 * 2.0 / 2, rel=0.02)  # std / sqrt(4 clients)
    mean = dp.round([torch.zeros(d)] * 4, torch.zeros(d))
    assert float((mean.double() * 4).std()) == pytest.approx(0.5 * 2.0, rel=0.02)  # the server adds nothing


def test_strategies_that_read_more_than_the_sum_of_deltas_are_refused():
    transforms = Pipeline([UserLevelDP(noise_multiplier=1.0)])
    for strategy in (Scaffold(), AdaptFed(), FedNova(), FedExP()):
        name = type(strategy).__name__
        with pytest.raises(ConfigError, match=f"^transforms: UserLevelDP .* but {name} keeps per-client state or uses"):
            check_transforms(strategy, transforms, asynchronous=False)
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
    with pytest.raises(ConfigError, match="^transforms: UserLevelDP works on the round's sums: .*, not FedECADO$"):
        check_requirements(FedECADO(), optimizer, transforms=transforms)  # the sharded path: each client's own update
    check_requirements(FedAdam(), optimizer, transforms=transforms)  # a server optimizer of the mean is taken
    with pytest.raises(ConfigError, match="it must exceed noise_multiplier / 2"):
        _DP(torch.zeros(1), clients_per_round=10, noise_multiplier=1.0, target_quantile=0.5)  # std 10 / 20


def test_its_setup_refuses_a_strategy_that_adds_into_more_than_the_mean_delta():
    """The requirements of a strategy of the sums path say what it keeps and reads; its sums say the rest."""
    strategy = FedExP()
    context = ServerContext(torch.zeros(3), 4, clients_per_round=2, seed=0)
    strategy.setup(context)
    with pytest.raises(ConfigError, match="^UserLevelDP noises the mean delta .* but the strategy adds into \\["):
        Pipeline([UserLevelDP(noise_multiplier=1.0)]).setup(TransformContext(context, strategy.sum_sizes()))


def test_a_server_optimizer_behind_it_takes_the_private_mean_as_its_pseudo_gradient():
    x = torch.tensor([1.0, 2.0, 3.0])
    dp, plain = _DP(x, noise_multiplier=0.0, clip=1.0, strategy=FedAdam(server_lr=0.1)), FedAdam(server_lr=0.1)
    plain.setup(ServerContext(x, 4))
    new = dp.round([[3.0, 4.0, 0.0], [0.3, 0.4, 0.0]], x)
    sums = Sums(plain.sum_sizes(), torch.device("cpu"))
    plain.accumulate(sums, _update(0, [0.45, 0.6, 0.0]))  # the clipped mean, (3, 4) / 5 and (0.3, 0.4) halved
    # within float32 rounding: the clipped mean can land one ulp from the literals, by machine (an unclipped or
    # undivided pseudo-gradient would be off by more than 0.01)
    torch.testing.assert_close(new, plain.aggregate(x, sums, 0), rtol=0, atol=1e-6)


def _fit(root, rounds, ckpt_path=None, **settings):
    dp = UserLevelDP(noise_multiplier=1.0, clip=0.5, target_quantile=0.5, count_stddev=1.0, **settings)
    trainer = small_trainer(root, rounds=rounds, clients_per_round=4)
    model = small_model(momentum=0.0)
    metrics = trainer.fit(model, small_data(), FedAvg(), ckpt_path=ckpt_path, transforms=[dp])
    return metrics, torch.cat([p.detach().reshape(-1) for p in model.parameters()]), trainer


def test_a_resumed_run_reports_the_same_epsilon_clip_and_weights_as_an_uninterrupted_one(tmp_path):
    uninterrupted, weights, _ = _fit(tmp_path / "full", rounds=4)
    _fit(tmp_path / "cut", rounds=2)
    resumed, resumed_weights, _ = _fit(tmp_path / "cut", rounds=4, ckpt_path="last")
    reference = RDPAccountant()
    for _ in range(4):
        reference.step(noise_multiplier=1.0, sample_rate=4 / 8)
    assert uninterrupted["user_level_dp/epsilon"] == pytest.approx(reference.get_epsilon(1e-5), rel=1e-9)
    for name in ("user_level_dp/epsilon", "user_level_dp/clip", "user_level_dp/unclipped_fraction"):
        assert resumed[name] == uninterrupted[name]
    assert torch.equal(resumed_weights, weights)


def test_the_budget_stops_the_run_with_a_checkpoint_of_the_last_round_within_it(tmp_path, capsys):
    reference = RDPAccountant()
    epsilons = []
    for _ in range(3):
        reference.step(noise_multiplier=1.0, sample_rate=4 / 8)
        epsilons.append(reference.get_epsilon(1e-5))
    metrics, _, trainer = _fit(tmp_path, rounds=6, target_epsilon=(epsilons[1] + epsilons[2]) / 2)
    assert metrics["user_level_dp/epsilon"] == pytest.approx(epsilons[1], rel=1e-9)
    assert "round 3 would take epsilon to" in capsys.readouterr().out
    checkpoint = torch.load(trainer.log_dir / "checkpoints" / "last.ckpt", weights_only=False)
    assert checkpoint["round"] == 2


@pytest.mark.slow
def test_one_and_two_processes_give_the_same_model(tmp_path):
    assert same_weights_on_two_processes(
        tmp_path,
        "--config",
        str(ROOT / "configs" / "privacy" / "user-level-adaptive.yaml"),
        *trainer_options(rounds=2, local_epochs=1, clients_per_round=4, client_eval_interval=0),
    )


def test_user_level_dp_combines_with_example_level_dp_sgd(tmp_path):
    dp = UserLevelDP(noise_multiplier=1.0, clip=0.5)
    trainer = small_trainer(tmp_path, rounds=1, clients_per_round=4, privacy=DPSGD(noise_multiplier=1.0))
    metrics = trainer.fit(small_model(momentum=0.0), small_data(), FedAvg(), transforms=[dp])
    assert metrics["user_level_dp/epsilon"] > 0 and metrics["privacy/epsilon_max"] > 0


def test_a_client_adds_its_unclipped_bit_minus_a_half_and_the_fraction_adds_the_half_back():
    """Andrew et al.: b - 1/2 has sensitivity 1/2, which the split of noise_multiplier between the releases assumes."""
    dp = _DP(
        torch.zeros(2),
        num_clients=8,
        clients_per_round=4,
        noise_multiplier=1.0,
        clip=1.0,
        target_quantile=0.5,
        count_stddev=1.0,
    )
    for client_id, delta, bit in ((0, [0.6, 0.0], 0.5), (1, [3.0, 4.0], -0.5)):  # unclipped: 1 - 1/2; clipped: 0 - 1/2
        sums = Sums(dp.pipeline.sizes, torch.device("cpu"))
        dp.transform.contribution(_update(client_id, delta), 0, sums)
        assert float(sums[UNCLIPPED]) == bit
    # the update (multiplier z_delta, sensitivity C) and the count (std 1, sensitivity 1/2: multiplier 2) compose to z
    multipliers = (dp.transform.update_multiplier, 2 * dp.transform.count_std)
    assert (multipliers[0] ** -2 + multipliers[1] ** -2) ** -0.5 == pytest.approx(1.0, rel=1e-12)
    exact = _DP(torch.zeros(2), num_clients=4, clients_per_round=4, noise_multiplier=0.0, target_quantile=0.5)
    exact.round([[3.0, 4.0], [0.1, 0.0], [0.0, 0.1], [0.2, 0.2]], torch.zeros(2))
    assert exact.metrics["user_level_dp/unclipped_fraction"] == 0.75  # (3 x 1/2 - 1/2) / 4 + 1/2
    sums = round_sums(exact.strategy, exact.pipeline, [], 1)
    sums.add(UNCLIPPED, 10.0)  # a noised count past every client: the fraction is clamped to [0, 1]
    assert exact.pipeline.recovered(sums, 1)["user_level_dp/unclipped_fraction"] == 1.0


@pytest.mark.parametrize("count_stddev", [0.0, 0.5])
def test_adaptive_clipping_refuses_a_count_noise_that_leaves_the_count_or_the_update_unprotected(count_stddev):
    with pytest.raises(ConfigError, match="it must exceed noise_multiplier / 2"):
        _DP(torch.zeros(1), noise_multiplier=1.0, target_quantile=0.5, count_stddev=count_stddev)


def test_the_sampling_rate_is_over_the_clients_the_run_samples_from_not_the_unseen_ones():
    dp = UserLevelDP(noise_multiplier=1.0)
    set_up(FedAvg(), [dp], torch.zeros(1), 10, clients_per_round=2, sampled_clients=8)
    assert dp.rate == 2 / 8 and dp.expected == 2
