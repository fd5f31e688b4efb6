"""A synthetic text corpus generated from the seed, naturally split by writer (like LEAF's Shakespeare roles)."""

import numpy as np
import torch

from lightfed.data.datasets import DatasetSource, DatasetSplits
from lightfed.data.next_token_dataset import NextTokenDataset
from lightfed.errors import ConfigError


class MarkovText(DatasetSource):
    """Token text from one Markov chain per writer, as next-token windows; no download, the same on every machine.

    Each chain predicts the next token from the previous ``order`` tokens. Its transition rows are a mix of a row shared
    by all writers and one of the writer's own, ``(1 - heterogeneity) * shared + heterogeneity * own``, both drawn from
    Dirichlet(``concentration``): a small concentration gives predictable text, a large one near-uniform noise. Writer
    ``k`` writes between half and 1.5 times ``windows_per_writer`` windows of ``seq_len + 1`` consecutive tokens (one
    token shared between neighbours); the last ``test_fraction`` of them go to the central test set. Examples are dicts
    (see ``NextTokenDataset``) whose ``client_ids`` are the writers: split them with ``NaturalIdPartitioner``. With
    ``task: authorship`` an example is ``(tokens, writer)`` instead, a classification over the writers (split it with
    a label partitioner: by writer, each client would hold one class).

    In a config (one client per writer):

    ```yaml
    data:
      dataset:
        class_path: lightfed.data.MarkovText
        init_args: {num_writers: 20, vocab_size: 16, seq_len: 32, windows_per_writer: 30, heterogeneity: 0.2}
      partitioner: {class_path: lightfed.data.NaturalIdPartitioner}
    ```

    Examples:
        >>> from lightfed.data import MarkovText
        >>> splits = MarkovText(num_writers=3, vocab_size=4, seq_len=5, windows_per_writer=4).load(seed=0)
        >>> splits.num_train, splits.num_test, splits.num_classes
        (9, 3, 4)
        >>> splits.train[0]
        {'tokens': tensor([3, 0, 2, 3, 0]), 'targets': tensor([0, 2, 3, 0, 2])}
        >>> splits.train_client_ids  # the writers
        array([0, 0, 0, 0, 0, 1, 1, 1, 2])
        >>> authorship = MarkovText(num_writers=3, vocab_size=4, seq_len=5, windows_per_writer=4, task="authorship")
        >>> authorship.load(seed=0).train[0]
        (tensor([3, 0, 2, 3, 0]), 0)
    """

    def __init__(
        self,
        num_writers: int = 20,
        vocab_size: int = 16,
        seq_len: int = 32,
        windows_per_writer: int = 30,
        order: int = 1,
        concentration: float = 0.1,
        heterogeneity: float = 0.2,
        test_fraction: float = 0.2,
        task: str = "next_token",
    ) -> None:
        """
        Args:
            num_writers: Number of writers (natural clients).
            vocab_size: Number of distinct tokens.
            seq_len: Tokens per example (inputs and targets each).
            windows_per_writer: Mean number of windows a writer writes, train and test together.
            order: Previous tokens each chain's next token depends on.
            concentration: Dirichlet concentration of the transition rows; smaller is more predictable.
            heterogeneity: Weight of the writer's own transitions against the shared ones (0: all writers alike).
            test_fraction: Share of each writer's windows held out for the central test set.
            task: "next_token" (predict each next token) or "authorship" (classify a window by its writer).
        """
        if task not in ("next_token", "authorship"):
            raise ConfigError(f"MarkovText task must be 'next_token' or 'authorship', got {task!r}")
        if num_writers < 1 or vocab_size < 2 or seq_len < 1 or order < 1:
            raise ConfigError(
                f"MarkovText needs num_writers >= 1, vocab_size >= 2, seq_len >= 1 and order >= 1, got {num_writers}, "
                f"{vocab_size}, {seq_len}, {order}"
            )
        if num_writers * vocab_size ** (order + 1) > 10**8:
            raise ConfigError(f"MarkovText tables of vocab_size {vocab_size} ** {order + 1} per writer are too large")
        if windows_per_writer < 2:
            raise ConfigError(
                f"windows_per_writer must be >= 2 (one to train on, one to test), got {windows_per_writer}"
            )
        if concentration <= 0 or not 0.0 <= heterogeneity <= 1.0:
            raise ConfigError(
                f"concentration must be > 0 and heterogeneity in [0, 1], got {concentration}, {heterogeneity}"
            )
        if not 0.0 < test_fraction < 1.0:
            raise ConfigError(f"test_fraction must be between 0 and 1 (exclusive), got {test_fraction}")
        self.num_writers = num_writers
        self.vocab_size = vocab_size
        self.seq_len = seq_len
        self.windows_per_writer = windows_per_writer
        self.order = order
        self.concentration = concentration
        self.heterogeneity = heterogeneity
        self.test_fraction = test_fraction
        self.task = task

    def load(self, seed: int) -> DatasetSplits:
        """Training and test windows of every writer, drawn from ``seed``; ``num_classes`` is ``vocab_size`` (the
        writers for authorship)."""
        rng = np.random.default_rng(seed)
        chains = self.transitions(rng)
        low = max(2, self.windows_per_writer // 2)
        counts = rng.integers(low, max(low, 3 * self.windows_per_writer // 2) + 1, size=self.num_writers)
        text = self._sample(chains, max(int(counts.max()) * self.seq_len + 1, self.order), rng)
        train, test, train_writers, test_writers = [], [], [], []
        for writer, count in enumerate(counts):
            starts = np.arange(count) * self.seq_len
            windows = text[writer, starts[:, None] + np.arange(self.seq_len + 1)]
            num_test = min(count - 1, max(1, round(count * self.test_fraction)))
            train.append(windows[: count - num_test])
            test.append(windows[count - num_test :])
            train_writers += [writer] * (count - num_test)
            test_writers += [writer] * num_test
        authorship = self.task == "authorship"
        train_set = NextTokenDataset(torch.from_numpy(np.concatenate(train)), train_writers, authorship)
        test_set = NextTokenDataset(torch.from_numpy(np.concatenate(test)), test_writers, authorship)
        if authorship:
            return DatasetSplits(train_set, test_set, self.num_writers, train_set.client_ids, train_set.client_ids)
        return DatasetSplits(train_set, test_set, self.vocab_size, train_client_ids=train_set.client_ids)

    def transitions(self, rng: np.random.Generator) -> np.ndarray:
        """Each writer's next-token probabilities, (num_writers, vocab_size ** order, vocab_size); row ``c`` is the
        context whose base-``vocab_size`` digits are the previous tokens, oldest first."""
        shape = (self.vocab_size**self.order, self.vocab_size)
        alpha = np.full(self.vocab_size, self.concentration)
        shared = rng.dirichlet(alpha, size=shape[0])
        own = rng.dirichlet(alpha, size=(self.num_writers, shape[0]))
        return (1.0 - self.heterogeneity) * shared + self.heterogeneity * own

    def _sample(self, chains: np.ndarray, length: int, rng: np.random.Generator) -> np.ndarray:
        """``length`` tokens of every writer's chain, (num_writers, length) int64; the first ``order`` are uniform."""
        writers = np.arange(self.num_writers)
        cumulative = np.cumsum(chains, axis=-1)
        text = np.empty((self.num_writers, length), dtype=np.int64)
        text[:, : self.order] = rng.integers(self.vocab_size, size=(self.num_writers, self.order))
        uniform = rng.random((length, self.num_writers))
        context = np.zeros(self.num_writers, dtype=np.int64)
        for position in range(self.order):
            context = context * self.vocab_size + text[:, position]
        num_contexts = self.vocab_size**self.order
        for position in range(self.order, length):
            below = cumulative[writers, context] < uniform[position, :, None]
            text[:, position] = np.minimum(below.sum(axis=1), self.vocab_size - 1)
            context = (context * self.vocab_size + text[:, position]) % num_contexts
        return text
