"""Column transforms for ``lightfed.data.HuggingFace``: a column's value (or a whole example) to tensors."""

from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from lightfed.errors import ConfigError

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


class Tokenize:
    """A text column as token ids of a local Hugging Face tokenizer, ``max_length`` of them (truncated, right-padded
    with the tokenizer's pad token): ``SequenceClassifier``'s inputs. With ``next_tokens``, ``CausalLM``'s example
    ``{"tokens": ids[:-1], "targets": ids[1:]}`` of ``max_length + 1`` ids, a padding target -100 (not scored); as
    the whole example it needs ``HuggingFace(inputs=<the text column>, label=None)``.

    In a config: ``transforms: {text: {class_path: lightfed.data.hf_transforms.Tokenize, init_args: {tokenizer:
    path/to/folder, max_length: 128}}}``. The tokenizer is loaded once, here (it pickles to DataLoader workers).
    """

    def __init__(self, tokenizer: str, max_length: int, next_tokens: bool = False) -> None:
        """
        Args:
            tokenizer: A local folder of a tokenizer (``save_pretrained``'s); nothing is downloaded.
            max_length: Token ids per example (the model's sequence length).
            next_tokens: Give next-token examples (for ``CausalLM``) rather than the ids.
        """
        if max_length < 1:
            raise ConfigError(f"Tokenize's max_length must be at least 1, got {max_length}")
        if not Path(tokenizer).expanduser().is_dir():
            raise ConfigError(f"tokenizer folder {tokenizer!r} does not exist: give a local save_pretrained folder")
        try:
            from transformers import AutoTokenizer
        except ImportError:
            raise ConfigError("Tokenize needs Hugging Face transformers: pip install 'lightfed[llm]'") from None
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(str(Path(tokenizer).expanduser()), local_files_only=True)
        except Exception as error:  # no tokenizer files, a corrupt one
            reason = " ".join(f"{type(error).__name__}: {error}".split())
            raise ConfigError(f"no tokenizer could be loaded from {tokenizer!r}: {reason}") from error
        if self.tokenizer.pad_token_id is None:
            raise ConfigError(f"the tokenizer in {tokenizer!r} has no pad token: save it with one (pad_token=...)")
        self.max_length, self.next_tokens = max_length, next_tokens

    def __call__(self, text: str) -> Tensor | dict[str, Tensor]:
        length = self.max_length + self.next_tokens
        ids = list(self.tokenizer(text, truncation=True, max_length=length)["input_ids"])
        padded = torch.full((length,), self.tokenizer.pad_token_id, dtype=torch.int64)
        padded[: len(ids)] = torch.tensor(ids, dtype=torch.int64)
        if not self.next_tokens:
            return padded
        targets = padded[1:].clone()
        targets[max(len(ids) - 1, 0) :] = -100  # by position: a pad token that is also EOS is still scored as EOS
        return {"tokens": padded[:-1], "targets": targets}
