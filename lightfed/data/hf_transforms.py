"""Column transforms for ``lightfed.data.HuggingFace``: a column's value (or a whole example) to tensors."""

from typing import Any

import numpy as np
import torch
from torch import Tensor

# LEAF's Shakespeare vocabulary (leaf/models/utils/language_utils.py): 80 characters, a character's id its position
LEAF_CHARACTERS = "\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}"


def to_tensor(value: Any) -> Tensor | str:
    """A number, list or array as a tensor; an image (PIL) as float32 (C, H, W) in [0, 1]; text as it is (for a
    tokenizer or an example transform)."""
    if isinstance(value, str):
        return value
    if hasattr(value, "getbands"):  # a PIL image, as datasets decodes an Image column
        array = np.asarray(value)
        array = array[:, :, None] if array.ndim == 2 else array
        return torch.from_numpy(array.copy()).permute(2, 0, 1).float().div_(255)
    return torch.as_tensor(value)


def leaf_characters(text: str) -> Tensor:
    """Each character's id in LEAF's 80-character vocabulary (int64; an unknown character is an error)."""
    ids = [LEAF_CHARACTERS.find(character) for character in text]
    if -1 in ids:
        raise ValueError(f"{text[ids.index(-1)]!r} is not in LEAF's Shakespeare vocabulary")
    return torch.tensor(ids, dtype=torch.int64)


def next_characters(example: dict[str, Any]) -> dict[str, Tensor]:
    """A Shakespeare example ``{"x": 80 characters, "y": the next one}`` as ``NextTokenLSTM``'s
    ``{"tokens": x, "targets": x[1:] + y}``: the next character at every position, the last one LEAF's target."""
    text = str(example["x"])
    return {"tokens": leaf_characters(text), "targets": leaf_characters(text[1:] + str(example["y"]))}
