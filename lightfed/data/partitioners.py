"""Partitioners: split a centralised dataset's examples across clients."""

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import ClassVar

import numpy as np

from lightfed.errors import ConfigError


def _check_alpha_and_min_size(alpha: float, min_size: int = 1) -> None:
    if alpha <= 0:
        raise ConfigError(f"alpha must be > 0, got {alpha}")
    if min_size < 1:
        raise ConfigError(f"min_size must be >= 1, got {min_size}")


class Partitioner(ABC):
    """Splits example indices across clients, deterministically from a seed.

    A partitioner of your own subclasses it and defines ``split``; a config names it under ``data.partitioner``.

    Examples:
        >>> import numpy as np
        >>> from lightfed.data import Partitioner
        >>> class EvenOdd(Partitioner):
        ...     def split(self, labels, seed):
        ...         indices = np.arange(len(labels))
        ...         return [indices[indices % 2 == k] for k in range(self.num_clients)]
        >>> labels = np.array([0, 0, 0, 1, 1, 1, 2, 2, 2, 2])
        >>> [part.tolist() for part in EvenOdd(num_clients=2).partition(labels, seed=0)]
        [[0, 2, 4, 6, 8], [1, 3, 5, 7, 9]]
        >>> EvenOdd(num_clients=3).partition(labels, seed=0)
        Traceback (most recent call last):
        ...
        lightfed.errors.ConfigError: partition of 10 examples leaves client 2 empty; use fewer clients than 3 or another
        partitioner
    """

    needs_labels = True  # False: splits any examples, labelled or not (the labels it is given are all 0)

    def __init__(self, num_clients: int) -> None:
        """
        Args:
            num_clients: Number of clients to split the examples across.
        """
        if num_clients < 1:
            raise ConfigError(f"num_clients must be >= 1, got {num_clients}")
        self.num_clients = num_clients

    def partition(self, labels: np.ndarray | None, seed: int, client_ids: np.ndarray | None = None) -> list[np.ndarray]:
        """One sorted int64 index array per client; raises ConfigError if a client would get no example.

        ``client_ids`` (a natural client id per example) is read by ``NaturalIdPartitioner`` only.
        """
        if labels is None:
            raise ConfigError(
                f"{type(self).__name__} splits by label but the dataset has none; "
                "give MapDataset targets, a dataset with a targets attribute, or DataModuleSource a label_key"
            )
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
    """Uniformly random split into near-equal parts.

    In a config:

    ```yaml
    data:
      partitioner:
        class_path: lightfed.data.IIDPartitioner
        init_args: {num_clients: 10}
    ```

    Examples:
        >>> import numpy as np
        >>> from lightfed.data import IIDPartitioner
        >>> labels = np.array([0, 0, 0, 1, 1, 1, 2, 2, 2, 2])
        >>> [part.tolist() for part in IIDPartitioner(num_clients=2).partition(labels, seed=0)]
        [[2, 3, 4, 6, 7], [0, 1, 5, 8, 9]]
    """

    needs_labels = False

    def split(self, labels: np.ndarray, seed: int) -> list[np.ndarray]:
        """Shuffle all indices and cut them into `num_clients` parts whose sizes differ by at most 1."""
        order = np.random.default_rng(seed).permutation(len(labels))
        return np.array_split(order, self.num_clients)


class DirichletPartitioner(Partitioner):
    """Label skew (Hsu et al. 2019): each class is split across clients in Dir(alpha) proportions.

    As in FedLab and FL-bench, a client already holding more than its equal share gets no
    more examples of later classes, and the draw is repeated until every client holds at
    least `min_size` examples. Smaller alpha means more skew.

    In a config:

    ```yaml
    data:
      partitioner:
        class_path: lightfed.data.DirichletPartitioner
        init_args: {num_clients: 20, alpha: 0.3}
    ```

    Examples:
        >>> import numpy as np
        >>> from lightfed.data import DirichletPartitioner
        >>> labels = np.array([0, 0, 0, 1, 1, 1, 2, 2, 2, 2])
        >>> partitioner = DirichletPartitioner(num_clients=2, alpha=0.5, min_size=2)
        >>> [part.tolist() for part in partitioner.partition(labels, seed=0)]
        [[6, 7, 8, 9], [0, 1, 2, 3, 4, 5]]
        >>> DirichletPartitioner(num_clients=2, min_size=10).partition(labels, seed=0)
        Traceback (most recent call last):
        ...
        lightfed.errors.ConfigError: 2 clients with min_size=10 need more than the 10 examples; lower min_size or
        num_clients
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
        _check_alpha_and_min_size(alpha, min_size)
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
            for part, chunk in zip(parts, np.split(indices, cuts), strict=True):
                part.extend(chunk)
        return [np.array(part, dtype=np.int64) for part in parts]


class ShardPartitioner(Partitioner):
    """Pathological non-IID split (McMahan et al. 2017): each client gets a few label-sorted shards.

    In a config:

    ```yaml
    data:
      partitioner:
        class_path: lightfed.data.ShardPartitioner
        init_args: {num_clients: 20, classes_per_client: 2}
    ```

    Examples:
        >>> import numpy as np
        >>> from lightfed.data import ShardPartitioner
        >>> labels = np.array([0, 0, 0, 1, 1, 1, 2, 2, 2, 2])
        >>> [part.tolist() for part in ShardPartitioner(num_clients=2, classes_per_client=1).partition(labels, seed=0)]
        [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]
    """

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


class QuantitySkewPartitioner(Partitioner):
    """Quantity skew (Li et al. 2022, NIID-Bench): client sizes in Dir(alpha) proportions, labels IID.

    Every client gets `min_size` examples and a Dir(alpha) share of the rest, cut from one shuffled order, so each
    client's labels follow the dataset's. Smaller alpha means more unequal sizes.

    In a config:

    ```yaml
    data:
      partitioner:
        class_path: lightfed.data.QuantitySkewPartitioner
        init_args: {num_clients: 20, alpha: 0.5, min_size: 10}
    ```

    Examples:
        >>> import numpy as np
        >>> from lightfed.data import QuantitySkewPartitioner
        >>> labels = np.array([0, 0, 0, 1, 1, 1, 2, 2, 2, 2])
        >>> partitioner = QuantitySkewPartitioner(num_clients=2, alpha=1.0, min_size=2)
        >>> [part.tolist() for part in partitioner.partition(labels, seed=0)]
        [[2, 4, 7, 9], [0, 1, 3, 5, 6, 8]]
    """

    needs_labels = False

    def __init__(self, num_clients: int, alpha: float = 0.5, min_size: int = 10) -> None:
        """
        Args:
            num_clients: Number of clients to split the examples across.
            alpha: Dirichlet concentration of the client sizes; small values give a few clients most examples.
            min_size: Fewest examples any client gets.
        """
        super().__init__(num_clients)
        _check_alpha_and_min_size(alpha, min_size)
        self.alpha = alpha
        self.min_size = min_size

    def split(self, labels: np.ndarray, seed: int) -> list[np.ndarray]:
        """Cut a random order of all indices at `min_size` per client plus the Dirichlet shares of the rest."""
        reserved = self.min_size * self.num_clients
        if reserved > len(labels):
            raise ConfigError(
                f"{self.num_clients} clients with min_size={self.min_size} need more than the "
                f"{len(labels)} examples; lower min_size or num_clients"
            )
        rng = np.random.default_rng(seed)
        proportions = rng.dirichlet(np.full(self.num_clients, self.alpha))
        shares = (np.cumsum(proportions)[:-1] * (len(labels) - reserved)).astype(int)
        cuts = np.arange(1, self.num_clients) * self.min_size + shares
        return np.split(rng.permutation(len(labels)), cuts)


class BalancedDirichletPartitioner(Partitioner):
    """Label skew with equal client sizes (FedLab's balanced Dirichlet split).

    Each client draws its label mix from Dir(alpha) over the classes; clients then take examples one at a time in a
    random interleaving, each drawing the label of its next example from its mix over the classes not used up yet.
    Client sizes differ by at most 1 and every example is used. Smaller alpha means more skew.

    In a config:

    ```yaml
    data:
      partitioner:
        class_path: lightfed.data.BalancedDirichletPartitioner
        init_args: {num_clients: 20, alpha: 0.5}
    ```

    Examples:
        >>> import numpy as np
        >>> from lightfed.data import BalancedDirichletPartitioner
        >>> labels = np.array([0, 0, 0, 1, 1, 1, 2, 2, 2, 2])
        >>> [part.tolist() for part in BalancedDirichletPartitioner(num_clients=2).partition(labels, seed=0)]
        [[0, 1, 2, 3, 7], [4, 5, 6, 8, 9]]
    """

    def __init__(self, num_clients: int, alpha: float = 0.5) -> None:
        """
        Args:
            num_clients: Number of clients to split the examples across.
            alpha: Dirichlet concentration of each client's label mix; small values give each client few classes.
        """
        super().__init__(num_clients)
        _check_alpha_and_min_size(alpha)
        self.alpha = alpha

    def split(self, labels: np.ndarray, seed: int) -> list[np.ndarray]:
        """Deal the examples one by one, each to the client whose turn it is, of a label drawn from its mix."""
        rng = np.random.default_rng(seed)
        classes, class_of = np.unique(labels, return_inverse=True)
        num_classes = len(classes)
        pools = [rng.permutation(np.flatnonzero(class_of == c)).tolist() for c in range(num_classes)]
        mixes = rng.dirichlet(np.full(num_classes, self.alpha), size=self.num_clients)
        sizes = [len(part) for part in np.array_split(np.arange(len(labels)), self.num_clients)]
        turns = rng.permutation(np.repeat(np.arange(self.num_clients), sizes))
        left = np.array([len(pool) for pool in pools], dtype=float)
        parts: list[list[int]] = [[] for _ in range(self.num_clients)]
        for client, draw in zip(turns, rng.random(len(labels)), strict=True):
            weights = mixes[client] * (left > 0)
            if weights.sum() == 0:  # the mix puts no weight on the classes left
                weights = (left > 0).astype(float)
            cumulative = np.cumsum(weights)
            label = np.searchsorted(cumulative, draw * cumulative[-1], side="right")
            parts[client].append(pools[label].pop())
            left[label] -= 1
        return [np.array(part, dtype=np.int64) for part in parts]


class NaturalIdPartitioner(Partitioner):
    """One client per natural id the dataset gives its examples (e.g. a writer): client k holds the examples of the
    k-th distinct id in sorted order.

    In a config (a dataset with natural client ids, such as ``MarkovText``'s writers):

    ```yaml
    data:
      partitioner: {class_path: lightfed.data.NaturalIdPartitioner}
    ```

    Examples:
        >>> import numpy as np
        >>> from lightfed.data import NaturalIdPartitioner
        >>> writers = np.array(["bob", "ann", "bob", "cat"])
        >>> [part.tolist() for part in NaturalIdPartitioner().partition(None, seed=0, client_ids=writers)]
        [[1], [0, 2], [3]]
        >>> NaturalIdPartitioner(num_clients=2).partition(None, seed=0, client_ids=writers)
        Traceback (most recent call last):
        ...
        lightfed.errors.ConfigError: the dataset has 3 distinct client ids but num_clients is 2; set num_clients to 3 or
        null
    """

    def __init__(self, num_clients: int | None = None) -> None:
        """
        Args:
            num_clients: Number of clients; null: one per distinct id. More clients than ids is an error.
        """
        if num_clients is not None:
            super().__init__(num_clients)
        self.num_clients = num_clients  # type: ignore[assignment]  # None: one client per distinct id

    def partition(self, labels: np.ndarray | None, seed: int, client_ids: np.ndarray | None = None) -> list[np.ndarray]:
        """Splits by ``client_ids``; ``labels`` and ``seed`` are unused."""
        if client_ids is None:
            raise ConfigError(
                "NaturalIdPartitioner needs a client id per training example; "
                "give MapDataset client_ids or a dataset with a client_ids attribute"
            )
        return super().partition(client_ids, seed)

    def split(self, client_ids: np.ndarray, seed: int) -> list[np.ndarray]:
        """Group the indices by id, ids in sorted order; clients beyond the last id get none (and are refused)."""
        ids, groups, counts = np.unique(client_ids, return_inverse=True, return_counts=True)
        num_clients = len(ids) if self.num_clients is None else self.num_clients
        if len(ids) > num_clients:
            raise ConfigError(
                f"the dataset has {len(ids)} distinct client ids but num_clients is {num_clients}; "
                f"set num_clients to {len(ids)} or null"
            )
        parts = np.split(np.argsort(groups, kind="stable"), np.cumsum(counts)[:-1])
        return parts + [np.empty(0, dtype=np.int64)] * (num_clients - len(ids))


class PathologicalPartitioner(Partitioner):
    """Each client holds examples of ``classes_per_client`` classes only (Flower's PathologicalPartitioner): the
    classes are assigned to the clients, then each class's examples, in dataset order, are cut into near-equal parts,
    one per client holding it (a class no client drew is left out). The same seed gives Flower's partition.

    ``assignment``: ``random`` (each client draws its classes without replacement), ``deterministic`` (client k holds
    classes k, k + 1, ... in sorted order, cyclically) or ``first-deterministic`` (client k holds class k, cyclically,
    and draws the rest).

    In a config:

    ```yaml
    data:
      partitioner:
        class_path: lightfed.data.PathologicalPartitioner
        init_args: {num_clients: 20, classes_per_client: 2, assignment: random}
    ```

    Examples:
        >>> import numpy as np
        >>> from lightfed.data import PathologicalPartitioner
        >>> labels = np.array([0, 0, 0, 1, 1, 1, 2, 2, 2, 2])
        >>> partitioner = PathologicalPartitioner(num_clients=3, classes_per_client=1, assignment="deterministic")
        >>> [part.tolist() for part in partitioner.partition(labels, seed=0)]
        [[0, 1, 2], [3, 4, 5], [6, 7, 8, 9]]
    """

    assignments = ("random", "deterministic", "first-deterministic")

    def __init__(self, num_clients: int, classes_per_client: int = 2, assignment: str = "random") -> None:
        """
        Args:
            num_clients: Number of clients to split the examples across.
            classes_per_client: Classes each client holds.
            assignment: How classes are assigned: random, deterministic or first-deterministic.
        """
        super().__init__(num_clients)
        if classes_per_client < 1:
            raise ConfigError(f"classes_per_client must be >= 1, got {classes_per_client}")
        if assignment not in self.assignments:
            raise ConfigError(f"assignment must be one of {', '.join(self.assignments)}, got {assignment!r}")
        self.classes_per_client = classes_per_client
        self.assignment = assignment

    def split(self, labels: np.ndarray, seed: int) -> list[np.ndarray]:
        """Assign classes to clients, then deal each class's examples to its clients in client order."""
        classes = np.unique(labels)
        if self.classes_per_client > len(classes):
            raise ConfigError(
                f"classes_per_client={self.classes_per_client} is more than the {len(classes)} classes of the dataset"
            )
        held = self._classes_of_clients(classes, np.random.default_rng(seed))
        parts: list[list[np.ndarray]] = [[] for _ in range(self.num_clients)]
        for c in classes:
            holders = [k for k, own in enumerate(held) if c in own]
            if holders:
                for k, chunk in zip(holders, np.array_split(np.flatnonzero(labels == c), len(holders)), strict=True):
                    parts[k].append(chunk)
        return [np.concatenate(part) if part else np.empty(0, dtype=np.int64) for part in parts]

    def _classes_of_clients(self, classes: np.ndarray, rng: np.random.Generator) -> list[list]:
        """The classes each client holds, drawn as Flower draws them."""
        held: list[list] = []
        for k in range(self.num_clients):
            if self.assignment == "random":
                held.append(rng.choice(classes, size=self.classes_per_client, replace=False).tolist())
            elif self.assignment == "deterministic":
                held.append([classes[(k + i) % len(classes)] for i in range(self.classes_per_client)])
            else:
                own = [classes[k % len(classes)]]
                while len(own) < self.classes_per_client:
                    label = rng.choice(classes, size=1)[0]
                    if label not in own:
                        own.append(label)
                held.append(own)
        return held


class SizeSkewPartitioner(Partitioner):
    """Client k (from 1) gets a share of the examples proportional to k, k^2 or e^k (Flower's Linear, Square and
    ExponentialPartitioner): each share rounded down, the last client taking what rounding leaves. Labels play no part.

    With ``shuffle`` the clients take consecutive runs of a random order of the examples (from the seed); without it,
    of the dataset's order, which is Flower's partition exactly.

    In a config:

    ```yaml
    data:
      partitioner:
        class_path: lightfed.data.SizeSkewPartitioner
        init_args: {num_clients: 20, growth: square}
    ```

    Examples:
        >>> import numpy as np
        >>> from lightfed.data import SizeSkewPartitioner
        >>> labels = np.zeros(10, dtype=np.int64)
        >>> partitioner = SizeSkewPartitioner(num_clients=3, growth="linear", shuffle=False)
        >>> [part.tolist() for part in partitioner.partition(labels, seed=0)]
        [[0], [1, 2, 3], [4, 5, 6, 7, 8, 9]]
    """

    needs_labels = False
    growths: ClassVar[dict[str, Callable[[np.ndarray], np.ndarray]]] = {
        "linear": lambda k: k,
        "square": np.square,
        "exponential": np.exp,
    }

    def __init__(self, num_clients: int, growth: str = "linear", shuffle: bool = True) -> None:
        """
        Args:
            num_clients: Number of clients to split the examples across.
            growth: How a client's share grows with its number: linear, square or exponential.
            shuffle: Cut a random order of the examples (false: the dataset's order, as Flower does).
        """
        super().__init__(num_clients)
        if growth not in self.growths:
            raise ConfigError(f"growth must be one of {', '.join(self.growths)}, got {growth!r}")
        self.growth = growth
        self.shuffle = shuffle

    def split(self, labels: np.ndarray, seed: int) -> list[np.ndarray]:
        """Consecutive runs of sizes floor(share x N), the last run the rest."""
        units = self.growths[self.growth](np.linspace(1, self.num_clients, self.num_clients))
        sizes = np.array(units / units.sum() * len(labels), dtype=np.int64)
        sizes[-1] += len(labels) - sizes.sum()
        order = np.random.default_rng(seed).permutation(len(labels)) if self.shuffle else np.arange(len(labels))
        return np.split(order, np.cumsum(sizes)[:-1])
