"""The benchmarks' CIFAR-shaped workload, made from the seed (no download)."""

import torch

from lightfed.data.datasets import DatasetSource, TensorSplits


class SyntheticCIFAR(DatasetSource):
    """``num_train`` and ``num_test`` random 3x32x32 float32 images in ``num_classes`` classes: Gaussian noise around
    one fixed random pattern per class (learnable)."""

    def __init__(self, num_train: int, num_test: int, num_classes: int = 10) -> None:
        self.num_train, self.num_test, self.num_classes = num_train, num_test, num_classes

    def load(self, seed: int) -> TensorSplits:
        generator = torch.Generator().manual_seed(seed)
        patterns = torch.randn(self.num_classes, 3, 32, 32, generator=generator)

        def split(n: int) -> tuple[torch.Tensor, torch.Tensor]:
            y = torch.randint(self.num_classes, (n,), generator=generator)
            x = torch.randn(n, 3, 32, 32, generator=generator).add_(patterns[y], alpha=0.5)
            return x, y

        train_x, train_y = split(self.num_train)
        test_x, test_y = split(self.num_test)
        return TensorSplits(train_x, train_y, test_x, test_y, self.num_classes)
