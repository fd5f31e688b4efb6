"""Partitioners: split a centralised dataset's examples across clients."""

from abc import ABC, abstractmethod

import numpy as np

from lightfed.errors import ConfigError


class Partitioner(ABC):
    """Splits example indices across clients, deterministically from a seed."""

    def __init__(self, num_clients: int) -> None:
        """
        Args:
            num_clients: Number of clients to split the examples across.
        """
        if num_clients < 1:
            raise ConfigError(f"num_clients must be >= 1, got {num_clients}")
        self.num_clients = num_clients

    def partition(self, labels: np.ndarray, seed: int) -> list[np.ndarray]:
        """One sorted int64 index array per client; raises ConfigError if a client would get no example."""
        parts = self.split(np.asarray(labels), seed)
        for k, part in enumerate(parts):
            if len(part) == 0:
                raise ConfigError(
                    f"partition of {len(labels)} examples leaves client {k} empty; "
                    f"use fewer clients than {self.num_clients} or another partitioner"
                )
        return [np.sort(part).astype(np.int64) for part in parts]

    @abstractmethod
    def split(self, labels: np.ndarray, seed: int) -> list[np.ndarray]:
        """One array of indices into `labels` per client; disjoint, together covering all of them."""


class IIDPartitioner(Partitioner):
    """Uniformly random split into near-equal parts."""

    def split(self, labels: np.ndarray, seed: int) -> list[np.ndarray]:
        """Shuffle all indices and cut them into `num_clients` parts whose sizes differ by at most 1."""
        order = np.random.default_rng(seed).permutation(len(labels))
        return np.array_split(order, self.num_clients)


class DirichletPartitioner(Partitioner):
    """Label skew (Hsu et al. 2019): each class is split across clients in Dir(alpha) proportions.

    As in FedLab and FL-bench, a client already holding more than its equal share gets no
    more examples of later classes, and the draw is repeated until every client holds at
    least `min_size` examples. Smaller alpha means more skew.
    """

    max_tries = 1000

    def __init__(self, num_clients: int, alpha: float = 0.5, min_size: int = 10) -> None:
        """
        Args:
            num_clients: Number of clients to split the examples across.
            alpha: Dirichlet concentration; small values give each client few classes.
            min_size: Fewest examples any client may get.
        """
        super().__init__(num_clients)
        if alpha <= 0:
            raise ConfigError(f"alpha must be > 0, got {alpha}")
        if min_size < 1:
            raise ConfigError(f"min_size must be >= 1, got {min_size}")
        self.alpha = alpha
        self.min_size = min_size

    def split(self, labels: np.ndarray, seed: int) -> list[np.ndarray]:
        """Draw per-class proportions until every client has at least `min_size` examples."""
        if self.min_size * self.num_clients > len(labels):
            raise ConfigError(
                f"{self.num_clients} clients with min_size={self.min_size} need more than the "
                f"{len(labels)} examples; lower min_size or num_clients"
            )
        rng = np.random.default_rng(seed)
        for _ in range(self.max_tries):
            parts = self._draw(labels, rng)
            if min(len(part) for part in parts) >= self.min_size:
                return parts
        raise ConfigError(
            f"no Dirichlet(alpha={self.alpha}) draw in {self.max_tries} tries gave all {self.num_clients} "
            f"clients >= {self.min_size} examples; raise alpha or lower min_size or num_clients"
        )

    def _draw(self, labels: np.ndarray, rng: np.random.Generator) -> list[np.ndarray]:
        """One Dirichlet split of every class across the clients."""
        equal_share = len(labels) / self.num_clients
        parts: list[list[int]] = [[] for _ in range(self.num_clients)]
        for c in np.unique(labels):
            indices = rng.permutation(np.flatnonzero(labels == c))
            proportions = rng.dirichlet(np.full(self.num_clients, self.alpha))
            proportions *= [len(part) < equal_share for part in parts]
            cuts = (np.cumsum(proportions / proportions.sum())[:-1] * len(indices)).astype(int)
            for part, chunk in zip(parts, np.split(indices, cuts)):
                part.extend(chunk)
        return [np.array(part, dtype=np.int64) for part in parts]


class ShardPartitioner(Partitioner):
    """Pathological non-IID split (McMahan et al. 2017): each client gets a few label-sorted shards."""

    def __init__(self, num_clients: int, classes_per_client: int = 2) -> None:
        """
        Args:
            num_clients: Number of clients to split the examples across.
            classes_per_client: Shards per client, so at most this many classes each.
        """
        super().__init__(num_clients)
        if classes_per_client < 1:
            raise ConfigError(f"classes_per_client must be >= 1, got {classes_per_client}")
        self.classes_per_client = classes_per_client

    def split(self, labels: np.ndarray, seed: int) -> list[np.ndarray]:
        """Sort by label, cut into num_clients * classes_per_client shards, deal them out at random."""
        num_shards = self.num_clients * self.classes_per_client
        if len(labels) < num_shards:
            raise ConfigError(
                f"{len(labels)} examples cannot fill {num_shards} shards "
                f"({self.num_clients} clients x {self.classes_per_client}); lower num_clients or classes_per_client"
            )
        rng = np.random.default_rng(seed)
        order = rng.permutation(len(labels))  # random order within each class
        shards = np.array_split(order[np.argsort(labels[order], kind="stable")], num_shards)
        dealt = rng.permutation(num_shards).reshape(self.num_clients, self.classes_per_client)
        return [np.concatenate([shards[s] for s in shard_ids]) for shard_ids in dealt]
