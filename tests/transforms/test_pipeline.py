"""The pipeline's composition of the privacy transforms: UserLevelDP sealed by SecureAggregation in front of FedAvg
gives UserLevelDP's model up to quantization; a sealing transform stands last; what a strategy or the trainer cannot
take is refused."""

import pytest
import torch

from lightfed.core.messages import ClientUpdate
from lightfed.core.seeding import sample_clients
from lightfed.core.transforms import Pipeline
from lightfed.errors import ConfigError
from lightfed.privacy import SecureAggregation, UserLevelDP
from lightfed.privacy.accountant import load_accountant
from lightfed.privacy.quantization import step_size
from lightfed.strategies import FedAvg, FedBuff, FedNova
from lightfed.strategies.requirements import check_transforms
from lightfed.transforms import NormBounding
from tests.transforms.pipeline_round import pipeline_round, set_up

CLIP = 1.0
# clipped to norm 1: [3, 4, 0] -> [0.6, 0.8, 0] and [0, 0, 2] -> [0, 0, 1]; [0.3, 0.4, 0] and [0.1, 0, 0] are kept
DELTAS = [[3.0, 4.0, 0.0], [0.3, 0.4, 0.0], [0.0, 0.0, 2.0], [0.1, 0.0, 0.0]]
MEAN = [0.25, 0.3, 0.25]  # their sum [1, 1.2, 1] over the 4 clients per round, each of weight 1


def _round(transforms: list, params: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
    """Round 0 of FedAvg behind ``transforms``: 4 of 6 clients (seed 0), the k-th of them sending ``DELTAS[k]``."""
    strategy = FedAvg()
    pipeline = set_up(strategy, transforms, params, num_clients=6, clients_per_round=4, rounds=1)
    cohort = sample_clients(0, 0, 6, 4)
    updates = [
        ClientUpdate(c, torch.tensor(d), torch.zeros(0), 10 + c, 1, 0.1, torch.tensor(0.0))
        for c, d in zip(cohort, DELTAS, strict=True)
    ]
    return pipeline_round(strategy, pipeline, updates, params)


def test_user_level_dp_sealed_by_secure_aggregation_gives_user_level_dps_params_up_to_one_level():
    """Each client seals [its clipped delta, weight 1, unclipped bit +-1/2] in 24-bit fixed point on [-4, 4] (levels
    of 8 / (2^24 - 1)), rounded stochastically: each coordinate within one level of the plain value, so the sum of
    the 4 clients' within 4 levels and its mean over the expected 4 clients within one level (the weight, quantized
    too, is set to 4 by UserLevelDP after unmasking). The params add that mean to [1, -1, 0.5] in float32: each
    result within 2^-23 of its exact value (a half ulp of the mean, below 0.5, and of the sum, below 2)."""
    params = torch.tensor([1.0, -1.0, 0.5])
    alone, alone_metrics = _round([UserLevelDP(noise_multiplier=0, clip=CLIP)], params)
    sealed_transforms = [
        UserLevelDP(noise_multiplier=0, clip=CLIP),
        SecureAggregation(bits=24, modulus_bits=40, clip_range=4),
    ]
    sealed, metrics = _round(sealed_transforms, params)
    assert torch.allclose(alone, params + torch.tensor(MEAN))
    level = step_size(4.0, 24)
    assert level == pytest.approx(8 / (2**24 - 1), rel=1e-12)
    torch.testing.assert_close(sealed, alone, rtol=0, atol=level + 2 * 2**-23)
    assert alone_metrics == {"user_level_dp/clip": CLIP}  # no noise: no epsilon; fixed clipping: no fraction
    assert metrics["user_level_dp/clip"] == CLIP
    assert metrics["secure_aggregation/dropped"] == 0 and metrics["secure_aggregation/clipped_fraction"] == 0
    assert 0 < metrics["secure_aggregation/quantization_rmse"] < level


def test_a_sealing_transform_stands_last_and_what_the_strategy_cannot_take_is_refused():
    with pytest.raises(ConfigError, match="^transforms: secure_aggregation seals what clients send: it must be the"):
        Pipeline([SecureAggregation(), UserLevelDP(noise_multiplier=1.0)])
    Pipeline([UserLevelDP(noise_multiplier=1.0), SecureAggregation()])  # last: taken
    with pytest.raises(ConfigError, match="^transforms: UserLevelDP gives the strategy only the mean .* but FedNova"):
        check_transforms(FedNova(), Pipeline([UserLevelDP(noise_multiplier=1.0)]), asynchronous=False)
    with pytest.raises(ConfigError, match="^transforms: SecureAggregation works on the round's sums: .* not FedBuff$"):
        check_transforms(FedBuff(), Pipeline([SecureAggregation()]), asynchronous=True)


def test_a_checkpoint_without_the_transforms_state_is_refused_where_a_transform_has_state():
    Pipeline([NormBounding(1.0)]).load_state_dict(None)  # stateless: nothing lost
    dp = UserLevelDP(noise_multiplier=1.0)
    dp.accountant, dp.clip, dp.epsilon = load_accountant("rdp", None), 1.0, 0.0  # as its setup leaves them
    with pytest.raises(ConfigError, match="the checkpoint holds no transforms' state, the run has 1"):
        Pipeline([dp]).load_state_dict(None)
    with pytest.raises(ConfigError, match="the checkpoint holds the state of 2 transforms, the run has 1"):
        Pipeline([NormBounding(1.0)]).load_state_dict([{}, {}])
