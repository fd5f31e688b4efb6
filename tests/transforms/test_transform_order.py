"""The order of transforms around a norm bound (UserLevelDP's clip, NormBounding): a transform that may change deltas
after a bound is refused in one line before anything is written; sealing, clipping again or keeping personal
coordinates after it stays allowed; a compressor before the bound sends deltas within it."""

import json

import pytest
import torch

from lightfed.attacks import Scaling
from lightfed.core.messages import ClientUpdate
from lightfed.core.seeding import sample_clients
from lightfed.core.sums import Sums
from lightfed.core.transforms import Pipeline, Transform
from lightfed.errors import ConfigError
from lightfed.personalization import FedPer
from lightfed.strategies import FedAvg
from lightfed.transforms import QSGD, NormBounding, SecureAggregation, SignCompression, TopK, UserLevelDP
from tests.conftest import QUICKSTART, refusal_lines, small_data, small_model, small_trainer, trainer_options
from tests.transforms.pipeline_round import set_up

CLIP = 0.1
COMPRESSORS = {"QSGD": lambda: QSGD(bits=1), "TopK": lambda: TopK(fraction=0.1), "SignCompression": SignCompression}
BOUNDS = {
    "UserLevelDP": lambda: UserLevelDP(noise_multiplier=1.0, clip=CLIP),
    "NormBounding": lambda: NormBounding(CLIP),
}


@pytest.mark.parametrize("bound", BOUNDS)
@pytest.mark.parametrize("compressor", COMPRESSORS)
def test_a_compressor_after_a_bound_is_refused_and_the_line_says_to_put_it_before(bound, compressor):
    with pytest.raises(ConfigError) as refused:
        Pipeline([BOUNDS[bound](), COMPRESSORS[compressor]()])
    assert str(refused.value) == (
        f"transforms: {compressor} may change the deltas that {bound} has bounded in norm, so the bound would not "
        f"hold for what clients send: put {compressor} before {bound}"
    )


def test_sealing_clipping_again_and_personal_coordinates_after_a_bound_are_taken_and_an_attack_before_it():
    Pipeline([UserLevelDP(noise_multiplier=1.0, clip=CLIP), SecureAggregation()])
    Pipeline([NormBounding(1.0), UserLevelDP(noise_multiplier=1.0, clip=CLIP), SecureAggregation()])
    Pipeline([UserLevelDP(noise_multiplier=1.0, clip=CLIP), NormBounding(1.0)])
    Pipeline([NormBounding(1.0), FedPer(personal=["head.*"])])  # it only zeroes coordinates: no norm grows
    Pipeline([Scaling(fraction=0.2, factor=10.0), NormBounding(1.0)])  # the trainer's order: the attack first
    Pipeline([NormBounding(1.0), Transform()])  # a transform that changes nothing
    with pytest.raises(ConfigError, match="^transforms: Scaling may change the deltas that NormBounding has bounded"):
        Pipeline([NormBounding(1.0), Scaling(fraction=0.2, factor=10.0)])


def test_a_clip_after_distributed_noise_is_refused_as_it_would_shrink_the_noise():
    distributed = UserLevelDP(noise_multiplier=1.0, clip=CLIP, noise="distributed")
    with pytest.raises(ConfigError) as refused:
        Pipeline([distributed, NormBounding(1.0)])
    assert str(refused.value) == (
        "transforms: NormBounding may change the deltas that UserLevelDP has bounded in norm, so the noise clients add "
        "would shrink below what is accounted: put NormBounding before UserLevelDP"
    )
    Pipeline([NormBounding(1.0), distributed, SecureAggregation()])


class _SentNorms:
    """The server path's ``accumulate``, which records the L2 norm of every update it is given."""

    def __init__(self, strategy: FedAvg) -> None:
        self.strategy, self.norms = strategy, []

    def __call__(self, sums: Sums, update: ClientUpdate) -> None:
        self.norms.append(float(torch.linalg.vector_norm(update.delta)))
        self.strategy.accumulate(sums, update)


@pytest.mark.parametrize("bound", BOUNDS)
@pytest.mark.parametrize("compressor", COMPRESSORS)
def test_a_compressor_before_a_bound_sends_deltas_within_it_round_after_round(bound, compressor):
    """3 rounds of 4 clients (all of them) whose deltas have norm 0.5 in 50 coordinates: error feedback's residuals
    grow what a compressor would send, and the bound after it clips that to 0.1 again."""
    strategy = FedAvg()
    pipeline = set_up(strategy, [COMPRESSORS[compressor](), BOUNDS[bound]()], torch.zeros(50), 4, 4, rounds=3)
    sent = _SentNorms(strategy)
    generator = torch.Generator().manual_seed(0)
    for round in range(3):
        sums = Sums({**strategy.sum_sizes(), **pipeline.sizes}, torch.device("cpu"))
        for client in sample_clients(0, round, 4, 4):
            delta = torch.randn(50, generator=generator)
            update = ClientUpdate(client, delta * (0.5 / delta.norm()), torch.zeros(0), 10, 1, 0.1, torch.tensor(0.0))
            pipeline.add(sums, update, round, sent)
        pipeline.recovered(sums, round)
    assert len(sent.norms) == 12 and max(sent.norms) <= CLIP * (1 + 1e-6)
    assert max(sent.norms) >= CLIP * (1 - 1e-6)  # every compressed delta of norm about 0.5 or more was clipped


def test_a_run_with_a_compressor_after_user_level_dp_is_refused_before_anything_is_written(tmp_path, capsys):
    transforms = [
        {"class_path": "lightfed.transforms.UserLevelDP", "init_args": {"noise_multiplier": 1.0, "clip": CLIP}},
        {"class_path": "lightfed.transforms.QSGD", "init_args": {"bits": 1}},
    ]
    argv = ["fit", "--config", str(QUICKSTART), *trainer_options(root_dir=tmp_path / "runs", rounds=1)]
    lines = refusal_lines([*argv, "--transforms", json.dumps(transforms)], capsys)
    assert lines == [
        "lightfed: error: transforms: QSGD may change the deltas that UserLevelDP has bounded in norm, so the bound "
        "would not hold for what clients send: put QSGD before UserLevelDP"
    ]
    assert list(tmp_path.iterdir()) == []


class _RecordsSentNorms(Transform):
    """Records the L2 norm of every delta it passes on, unchanged."""

    keeps_norm_bounds = True

    def __init__(self) -> None:
        self.norms: list[float] = []

    def contribution(self, update: ClientUpdate, round: int, sums: Sums) -> ClientUpdate:
        self.norms.append(float(torch.linalg.vector_norm(update.delta)))
        return update


def test_a_run_with_top_k_before_user_level_dp_sends_every_update_within_the_clip(tmp_path):
    recorder = _RecordsSentNorms()
    transforms = [TopK(fraction=0.1), UserLevelDP(noise_multiplier=1.0, clip=CLIP), recorder]
    trainer = small_trainer(tmp_path, rounds=2)
    metrics = trainer.fit(small_model(momentum=0.0), small_data(), FedAvg(), transforms=transforms)
    assert len(recorder.norms) == 2 * 4 and max(recorder.norms) <= CLIP * (1 + 1e-9)
    assert metrics["user_level_dp/clip"] == CLIP and metrics["user_level_dp/epsilon"] > 0
