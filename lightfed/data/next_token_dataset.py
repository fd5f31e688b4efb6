"""Next-token prediction examples: windows of a token stream as dicts of input tokens and their successors."""

from collections.abc import Sequence

import numpy as np
from torch import Tensor
from torch.utils.data import Dataset


class NextTokenDataset(Dataset):
    """Map-style dataset of token windows; item ``i`` is ``{"tokens": w[:-1], "targets": w[1:]}`` for window ``w``,
    or with ``writer_labels`` the classification example ``(w[:-1], its client id)`` (authorship attribution).

    A DataLoader stacks the items into dict batches of (batch, seq_len) int64 tensors. ``client_ids`` gives each
    window its natural client (e.g. its writer), read by ``NaturalIdPartitioner``.

    ``MarkovText`` builds it; a source of your own token windows may return it too.

    Examples:
        >>> import torch
        >>> from lightfed.data import NextTokenDataset
        >>> windows = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8]])
        >>> dataset = NextTokenDataset(windows, client_ids=[0, 1])
        >>> len(dataset), dataset[0]
        (2, {'tokens': tensor([1, 2, 3]), 'targets': tensor([2, 3, 4])})
        >>> NextTokenDataset(windows, client_ids=[0, 1], writer_labels=True)[1]
        (tensor([5, 6, 7]), 1)
    """

    def __init__(self, windows: Tensor, client_ids: Sequence[int] | np.ndarray, writer_labels: bool = False) -> None:
        """
        Args:
            windows: int64 token ids, (num_windows, seq_len + 1).
            client_ids: The natural client id of each window.
            writer_labels: Items are ``(tokens, client id)`` instead of next-token dicts.
        """
        if windows.ndim != 2 or windows.size(1) < 2:
            raise ValueError(f"windows must be (num_windows, seq_len + 1), seq_len >= 1; got {tuple(windows.shape)}")
        if len(client_ids) != len(windows):
            raise ValueError(f"{len(client_ids)} client ids for {len(windows)} windows")
        self.windows = windows.long()
        self.client_ids = np.asarray(client_ids, dtype=np.int64)
        self.writer_labels = writer_labels

    def __len__(self) -> int:
        return len(self.windows)

    def __getitem__(self, index: int) -> dict[str, Tensor] | tuple[Tensor, int]:
        window = self.windows[index]
        if self.writer_labels:
            return window[:-1], int(self.client_ids[index])
        return {"tokens": window[:-1], "targets": window[1:]}
