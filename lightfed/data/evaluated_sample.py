"""The bound on central evaluation: a validation split or test set larger than ``eval_examples`` is evaluated on a
fixed sample of that many of its examples, drawn from the run's seed, so that its cost does not grow with the
population."""

from dataclasses import replace

import numpy as np
from lightning.fabric.utilities.rank_zero import rank_zero_only
from torch.utils.data import Subset

from lightfed.data.datasets import DatasetSplits, TensorSplits, size
from lightfed.streams import DataStream

EVAL_EXAMPLES = 100_000  # the default bound: every run of the project's configs evaluates all of its examples


def sample(total: int, count: int | None, rng: np.random.Generator) -> np.ndarray | None:
    """Sorted positions of ``count`` of ``total`` examples drawn without replacement; None when all are kept."""
    if count is None or total <= count:
        return None
    return np.sort(rng.choice(total, count, replace=False))


def evaluated_sample(
    splits: TensorSplits | DatasetSplits, val_indices: np.ndarray, count: int | None, seed: int
) -> tuple[TensorSplits | DatasetSplits, np.ndarray]:
    """The test set and the validation split (indices of training examples) that central evaluation reads: each
    one's fixed sample of ``count`` examples when it holds more (the validation split first, then the test set, from
    the stream ``DataStream.EVALUATED_SAMPLE`` of ``seed``), and prints which it sampled."""
    rng = np.random.default_rng([seed, DataStream.EVALUATED_SAMPLE])
    val = sample(len(val_indices), count, rng)
    if isinstance(splits, TensorSplits):
        num_test = len(splits.test_y)
        test = sample(num_test, count, rng)
        if test is not None:
            splits = replace(splits, test_x=splits.test_x[test], test_y=splits.test_y[test])
    else:
        num_test = size(splits.test)
        test = sample(num_test, count, rng)
        if test is not None:
            splits = replace(splits, test=Subset(splits.test, test.tolist()))
    sampled = [
        f"{name} {count:,} of its {total:,} examples"
        for name, total, picked in (("validation", len(val_indices), val), ("test", num_test, test))
        if picked is not None
    ]
    if sampled:
        _print(
            f"lightfed: central evaluation reads a fixed sample (data.eval_examples={count}, drawn from the seed): "
            + ", ".join(sampled)
        )
    return splits, val_indices if val is None else val_indices[val]


@rank_zero_only
def _print(line: str) -> None:
    print(line, flush=True)
