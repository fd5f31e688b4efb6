"""Whether one dataset's examples are all examples of another: the same rows of one dataset under any ``Subset``s,
or, for in-memory ``TensorDataset``s, the same bytes (a copy of the rows)."""

import numpy as np
import torch
from torch.utils.data import Dataset, Subset, TensorDataset

from lightfed.data.datasets import size


def contained(part: Dataset, whole: Dataset) -> bool:
    """Whether every example of ``part`` (not empty) is an example of ``whole``: by index where both select rows of
    one dataset, by content where both are rows of ``TensorDataset``s. Other datasets are compared by index only
    (reading every image of a folder to hash it would cost a pass over the data, and random transforms change it)."""
    if size(part) == 0 or size(whole) == 0:
        return False
    (part_base, part_rows), (whole_base, whole_rows) = _rows(part), _rows(whole)
    if part_base is whole_base:
        return bool(np.isin(part_rows, whole_rows).all())
    part_content, whole_content = _content(part_base, part_rows), _content(whole_base, whole_rows)
    return part_content is not None and whole_content is not None and part_content <= whole_content


def _rows(dataset: Dataset) -> tuple[Dataset, np.ndarray]:
    """The dataset under ``dataset``'s ``Subset``s, and which of its rows ``dataset``'s examples are."""
    rows = np.arange(size(dataset))
    while isinstance(dataset, Subset):
        rows = np.asarray(dataset.indices)[rows]
        dataset = dataset.dataset
    return dataset, rows


def _content(dataset: Dataset, rows: np.ndarray) -> set[bytes] | None:
    """Each row's bytes (every tensor of the row, with their dtypes) for a ``TensorDataset``; None for another."""
    if not isinstance(dataset, TensorDataset):
        return None
    index = torch.as_tensor(rows, dtype=torch.long)
    parts = [t[index].contiguous().reshape(len(rows), -1).view(torch.uint8).numpy() for t in dataset.tensors]
    joined = np.ascontiguousarray(np.concatenate([*parts, _dtypes(dataset, len(rows))], axis=1))
    return set(joined.view(np.dtype((np.void, joined.shape[1]))).ravel().tolist())


def _dtypes(dataset: TensorDataset, count: int) -> np.ndarray:
    """The tensors' dtypes as bytes, repeated per row (equal bytes of other dtypes are other examples)."""
    tag = np.frombuffer(" ".join(str(t.dtype) for t in dataset.tensors).encode(), dtype=np.uint8)
    return np.broadcast_to(tag, (count, len(tag)))
