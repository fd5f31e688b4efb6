"""Augmentation of training batches: crop and flip per image (checked by hand), seeded, never on evaluation batches."""

from pathlib import Path

import pytest
import torch
from torchvision.transforms import v2

from lightfed.cli import build_parser
from lightfed.data import Augmentation, Digits, IIDPartitioner, MapDataset
from lightfed.data.augmentation import crop_flip
from lightfed.data.module import FederatedDataModule
from lightfed.errors import ConfigError

CPU = torch.device("cpu")
IMAGE = torch.arange(1.0, 10.0).view(1, 1, 3, 3)  # [[1, 2, 3], [4, 5, 6], [7, 8, 9]]
PADDED = torch.tensor(
    [  # IMAGE padded by 1 with zeros
        [0, 0, 0, 0, 0],
        [0, 1, 2, 3, 0],
        [0, 4, 5, 6, 0],
        [0, 7, 8, 9, 0],
        [0, 0, 0, 0, 0],
    ],
    dtype=torch.float32,
)


def test_crop_and_flip_by_hand():
    images = torch.cat([IMAGE, 10 * IMAGE], dim=1).expand(4, 2, 3, 3)  # two channels: the image and 10 x it
    top, left, mirror = torch.tensor([0, 0, 2, 1]), torch.tensor([0, 0, 2, 2]), torch.tensor([False, True, False, True])
    out = crop_flip(images, top, left, mirror, (3, 3), padding=1)
    expected = torch.tensor(
        [
            [[0, 0, 0], [0, 1, 2], [0, 4, 5]],  # top 0, left 0
            [[0, 0, 0], [2, 1, 0], [5, 4, 0]],  # the same, mirrored: columns in reverse order
            [[5, 6, 0], [8, 9, 0], [0, 0, 0]],  # top 2, left 2
            [[0, 3, 2], [0, 6, 5], [0, 9, 8]],  # top 1, left 2, mirrored
        ],
        dtype=torch.float32,
    )
    assert torch.equal(out[:, 0], expected) and torch.equal(out[:, 1], 10 * expected)


def test_reflect_padding_and_a_crop_smaller_than_the_image_by_hand():
    reflected = crop_flip(IMAGE, torch.tensor([0]), torch.tensor([0]), torch.tensor([False]), (3, 3), 1, "reflect")
    assert torch.equal(reflected[0, 0], torch.tensor([[5.0, 4, 5], [2, 1, 2], [5, 4, 5]]))
    smaller = crop_flip(IMAGE, torch.tensor([1]), torch.tensor([0]), torch.tensor([False]), (2, 2))
    assert torch.equal(smaller[0, 0], torch.tensor([[4.0, 5], [7, 8]]))


def test_each_image_draws_its_own_crop_and_flip_among_the_eighteen_possible():
    candidates = [
        crop
        for top in range(3)
        for left in range(3)
        for crop in (PADDED[top : top + 3, left : left + 3], PADDED[top : top + 3, left : left + 3].flip(1))
    ]
    out = Augmentation(padding=1, horizontal_flip=True)(IMAGE.expand(400, 1, 3, 3), torch.Generator().manual_seed(0))
    matches = [[i for i, candidate in enumerate(candidates) if torch.equal(image[0], candidate)] for image in out]
    assert all(len(found) == 1 for found in matches)  # each output is exactly one hand-made crop
    assert {found[0] for found in matches} == set(range(18))  # and each of the 18 turns up in 400 draws


def augmented_data(augmentation: Augmentation | None) -> FederatedDataModule:
    data = FederatedDataModule(
        Digits(), IIDPartitioner(4), batch_size=16, eval_batch_size=64, augmentation=augmentation
    )
    data.setup(seed=0, device=CPU)
    return data


def test_a_clients_augmented_batches_depend_only_on_its_seed():
    data, plain = augmented_data(Augmentation(padding=2, horizontal_flip=True)), augmented_data(None)

    def batches(module: FederatedDataModule, seed: int) -> list:
        return list(module.client_batches(1, torch.Generator().manual_seed(seed), steps=5))

    first, again, other = batches(data, 7), batches(data, 7), batches(data, 8)
    assert all(torch.equal(a[0], b[0]) for a, b in zip(first, again, strict=False))
    assert not torch.equal(first[0][0], other[0][0])
    unaugmented = batches(plain, 7)[0]  # the first pass's order is drawn before any augmentation
    assert torch.equal(first[0][1], unaugmented[1]) and not torch.equal(first[0][0], unaugmented[0])


def test_evaluation_batches_are_not_augmented_and_poisson_subsets_are():
    data, plain = augmented_data(Augmentation(padding=2, horizontal_flip=True)), augmented_data(None)
    for augmented, reference in (
        (data.test_batches(), plain.test_batches()),
        (data.client_eval_batches(2), plain.client_eval_batches(2)),
    ):
        pairs = zip(augmented, reference, strict=True)
        assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in pairs)
    positions = torch.arange(20)
    subset = data.client_subset(2, positions, torch.Generator().manual_seed(0))
    assert not torch.equal(subset[0], plain.client_subset(2, positions)[0])


def test_a_v2_transform_draws_one_set_of_parameters_per_batch_from_the_global_rng():
    flip = Augmentation(transforms=[v2.RandomHorizontalFlip(p=0.5)])
    images = torch.rand(8, 1, 4, 4)
    outcomes = []
    for seed in range(8):
        torch.manual_seed(seed)
        out = flip(images, None)
        flipped = [torch.equal(o, i.flip(-1)) for o, i in zip(out, images, strict=False)]
        assert all(flipped) or not any(flipped)  # the whole batch or none of it
        torch.manual_seed(seed)
        assert torch.equal(flip(images, None), out)
        outcomes.append(flipped[0])
    assert any(outcomes) and not all(outcomes)


def test_impossible_crops_are_config_errors():
    with pytest.raises(ConfigError, match="crop_size 8 is larger than the padded 6x6 images"):
        Augmentation(crop_size=8, padding=1)(torch.zeros(2, 1, 4, 4), None)
    with pytest.raises(ConfigError, match="padding >= 0"):
        Augmentation(padding=-1)


CIFAR10 = Path(__file__).resolve().parents[2] / "configs" / "cifar10"


@pytest.mark.parametrize("overlay", sorted(set(CIFAR10.glob("*.yaml")) - {CIFAR10 / "base.yaml"}), ids=lambda p: p.stem)
def test_cifar10_configs_use_the_standard_crop_and_flip(overlay):
    parser, _ = build_parser()
    config = parser.parse_args(["fit", "--config", str(CIFAR10 / "base.yaml"), "--config", str(overlay)])
    augmentation = config.fit.data.augmentation.init_args
    assert (augmentation.crop_size, augmentation.padding, augmentation.horizontal_flip) == (None, 4, True)


def test_batches_that_are_not_images_first_are_a_config_error():
    examples = [{"image": torch.zeros(1, 2, 2), "label": k % 2} for k in range(4)]  # a list is a map-style dataset
    dataset = MapDataset(examples, examples, targets=[0, 1, 0, 1])
    data = FederatedDataModule(dataset, IIDPartitioner(2), augmentation=Augmentation(horizontal_flip=True))
    data.setup(seed=0, device=CPU)
    with pytest.raises(ConfigError, match="data.augmentation needs batches"):
        next(data.client_batches(0, torch.Generator().manual_seed(0), epochs=1))
