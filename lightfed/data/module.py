"""FederatedDataModule: a dataset, its split across clients, a central test set, and batches on the device."""

import math
from collections.abc import Iterator, Sequence
from typing import cast

import numpy as np
import torch
from lightning import LightningDataModule
from torch import Tensor

from lightfed.data.augmentation import Augmentation
from lightfed.data.client_groups import ClientGroups
from lightfed.data.datasets import DatasetSource, DatasetSplits, Digits, TensorSplits
from lightfed.data.evaluated_sample import EVAL_EXAMPLES, evaluated_sample
from lightfed.data.lightning_datamodule import DataModuleSource
from lightfed.data.loader_batches import LoaderBatches
from lightfed.data.partitioners import Partitioner
from lightfed.data.tensor_batches import Batch, TensorBatches
from lightfed.data.validation import (
    HOLDOUT_DRAWS,
    check_fraction,
    held_count,
    held_out,
    split_each,
)
from lightfed.errors import ConfigError
from lightfed.streams import DataStream


class FederatedDataModule:
    """Dataset + partitioner + a validation split held out from the training examples + the central test split.

    In-memory datasets are batched by gathering tensors by index (no DataLoader), on the accelerator when
    ``on_device``; map-style datasets (``MapDataset``) are read through DataLoaders. Training batches (never evaluation
    batches) go through ``augmentation`` on the device.

    In a config, the ``data:`` section:

    ```yaml
    data:
      dataset: {class_path: lightfed.data.Digits}
      partitioner:
        class_path: lightfed.data.DirichletPartitioner
        init_args: {num_clients: 20, alpha: 0.5}
      val_fraction: 0.1
      batch_size: 16
    ```

    Examples:
        Four clients of a synthetic dataset, each with its own number of examples:

        >>> import torch
        >>> from lightfed import FederatedDataModule
        >>> from lightfed.data import Synthetic
        >>> data = FederatedDataModule(Synthetic(num_clients=4), batch_size=16)
        >>> data.setup(seed=0, device=torch.device("cpu"))
        >>> data.client_sizes(range(4)), data.has_validation
        ([86, 66, 177, 85], True)
    """

    def __init__(
        self,
        dataset: DatasetSource | LightningDataModule | None = None,
        partitioner: Partitioner | None = None,
        batch_size: int = 32,
        eval_batch_size: int = 512,
        on_device: bool = True,
        augmentation: Augmentation | None = None,
        num_workers: int = 0,
        pin_memory: bool = False,
        val_fraction: float = 0.1,
        client_val_fraction: float = 0.0,
        eval_examples: int | None = EVAL_EXAMPLES,
        holdout_draws: str = "per_client",
    ) -> None:
        """
        Args:
            dataset: Where the examples come from: a dataset source or a ``LightningDataModule`` (read through
                ``DataModuleSource``); null: a new ``Digits()`` (scikit-learn's digits, embedded).
            partitioner: How the training examples are split across clients; leave unset for naturally federated
                datasets (e.g. Synthetic).
            batch_size: Local training batch size.
            eval_batch_size: Batch size for evaluation passes.
            on_device: Keep in-memory data on the accelerator (fastest when it fits in its memory).
            augmentation: Random crop, flip and v2 transforms applied to each training batch on the device.
            num_workers: DataLoader worker processes reading a map-style dataset (0: read in this process); they
                are forked by a fork server, never from the run's process, so the datasets must pickle.
            pin_memory: Read a map-style dataset's batches into pinned memory (faster copies to a GPU).
            val_fraction: Share of the training examples held out, before the clients get theirs, as the validation
                split that ``val_*`` metrics, monitors and early stopping read (stratified by label, drawn from the
                seed); a naturally federated dataset gives this share of each client's examples. 0: no validation
                split and no ``val_*`` metrics.
            client_val_fraction: Share of each client's examples held out from its training for per-client evaluation
                (``trainer.client_eval_interval``); 0: per-client evaluation reads the client's training examples.
            eval_examples: The most examples of the validation split and of the test set that central evaluation
                reads: a larger one is evaluated on a fixed sample of this many of its examples, drawn from the seed
                (the rest stay out of training all the same), so that its cost does not grow with the population;
                setup prints which; null: all of them.
            holdout_draws: How each client's held-out shares are drawn (``client_val_fraction``, and ``val_fraction``
                of a dataset already split across clients): "per_client" shuffles client after client; "vectorized"
                draws one random key per example for all clients at once (the same distribution, other draws).
        """
        if batch_size < 1 or eval_batch_size < 1:
            raise ConfigError(
                f"data.batch_size and data.eval_batch_size must be >= 1, got {batch_size}, {eval_batch_size}"
            )
        if num_workers < 0:
            raise ConfigError(f"data.num_workers must be >= 0, got {num_workers}")
        check_fraction("val_fraction", val_fraction)
        check_fraction("client_val_fraction", client_val_fraction)
        if eval_examples is not None and eval_examples < 1:
            raise ConfigError(f"data.eval_examples must be >= 1 or null, got {eval_examples}")
        if holdout_draws not in HOLDOUT_DRAWS:
            raise ConfigError(f"data.holdout_draws must be one of {', '.join(HOLDOUT_DRAWS)}, got {holdout_draws!r}")
        if isinstance(dataset, LightningDataModule):
            dataset = DataModuleSource(dataset)
        self.dataset = Digits() if dataset is None else dataset
        self.partitioner = partitioner
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size
        self.on_device = on_device
        self.augmentation = augmentation
        self.num_workers = num_workers
        self.pin_memory = pin_memory
        self.val_fraction = val_fraction
        self.client_val_fraction = client_val_fraction
        self.eval_examples = eval_examples
        self.holdout_draws = holdout_draws
        self.num_classes = 0
        self.label_names: list[str] | None = None  # what each label code stands for, where the dataset coded them
        self._batches: TensorBatches | LoaderBatches | None = None
        self._client_indices: ClientGroups = ClientGroups.of([])

    def setup(self, seed: int, device: torch.device) -> None:
        """Loads the dataset, holds out the validation split and splits the rest across clients, deterministically
        from ``seed``."""
        splits = self.dataset.load(seed)
        check_not_empty(getattr(self.dataset, "name", type(self.dataset).__name__), splits)
        rng = np.random.default_rng([seed, DataStream.VALIDATION])
        indices, val_indices = self._partition(splits, seed, rng)
        if self.client_val_fraction > 0:
            indices, eval_indices = split_each(
                indices, self.client_val_fraction, rng, splits.train_labels, self.holdout_draws
            )
        else:  # what split_each gives for 0, without its loop over the clients
            eval_indices = indices = ClientGroups.of(indices)
        splits, val_indices = evaluated_sample(splits, val_indices, self.eval_examples, seed)
        self.device = device
        self.num_classes = splits.num_classes
        self.label_names = getattr(splits, "label_names", None)
        common = (indices, val_indices, eval_indices, self.batch_size, self.eval_batch_size, device)
        if isinstance(splits, TensorSplits):
            self._batches = TensorBatches(splits, *common, self.on_device)
        else:
            self._batches = LoaderBatches(splits, *common, self.num_workers, self.pin_memory)
        self._client_indices = self._source.client_indices

    def _partition(
        self, splits: TensorSplits | DatasetSplits, seed: int, rng: np.random.Generator
    ) -> tuple[Sequence[np.ndarray], np.ndarray]:
        """The clients' training examples and the validation split (indices of the training examples). The split is
        held out first, stratified by natural client id (where the dataset gives them) and label; the partitioner
        splits the rest. A dataset already split across clients gives the split a share of each client's examples.
        Refuses empty clients."""
        name = type(self.dataset).__name__
        if splits.client_indices is not None and self.partitioner is not None:
            raise ConfigError(f"{name} is already split across clients; remove data.partitioner")
        labels, client_ids = splits.train_labels, splits.train_client_ids
        if splits.client_indices is None:
            if self.partitioner is None:
                raise ConfigError(f"{name} needs data.partitioner (e.g. lightfed.data.DirichletPartitioner)")
            size = splits.num_train
            if isinstance(splits, DatasetSplits) and splits.val_indices is not None:  # the dataset's own
                val = splits.val_indices if self.val_fraction > 0 else np.empty(0, dtype=np.int64)
                pool = np.setdiff1d(np.arange(size), splits.val_indices)
            else:
                val = held_out(size, held_count(size, self.val_fraction), rng, client_ids, labels)
                pool = np.delete(np.arange(size), val)
            if labels is None and not self.partitioner.needs_labels:
                labels = np.zeros(size, dtype=np.int64)
            parts = self.partitioner.partition(  # refuses empties
                None if labels is None else labels[pool], seed, None if client_ids is None else client_ids[pool]
            )
            return [pool[part] for part in parts], val
        clients = ClientGroups.of(splits.client_indices)
        empty = np.flatnonzero(clients.sizes == 0)
        if len(empty):
            raise ConfigError(f"{name} gives client {empty[0]} no training examples")
        kept, held = split_each(clients, self.val_fraction, rng, labels, self.holdout_draws)
        return kept, np.sort(held.flat)

    @property
    def _source(self) -> TensorBatches | LoaderBatches:
        assert self._batches is not None, "FederatedDataModule.setup(seed, device) first"
        return self._batches

    @property
    def _tensors(self) -> TensorBatches:
        """The batches of an in-memory dataset, which holds its examples as tensors."""
        if not isinstance(self._source, TensorBatches):
            raise ConfigError(
                f"{type(self.dataset).__name__} is read through DataLoaders: train_x, test_x and the like are for "
                "in-memory datasets only"
            )
        return self._source

    @property
    def num_clients(self) -> int:
        return len(self._client_indices)

    def client_size(self, client_id: int) -> int:
        return self._client_indices.size(client_id)

    def client_sizes(self, client_ids: Sequence[int]) -> list[int]:
        """``client_size`` of each of ``client_ids``, read from the offsets together."""
        offsets, ids = self._client_indices.offsets, np.asarray(client_ids, dtype=np.int64)
        return (offsets[ids + 1] - offsets[ids]).tolist()

    def batches_per_epoch(self, client_id: int) -> int:
        """The batches of one pass over a client's examples (the last one partial when they do not divide)."""
        return self.batches_of(self.client_size(client_id))

    def batches_of(self, examples: int) -> int:
        """The batches of one pass over ``examples`` examples (at least one)."""
        return max(1, math.ceil(examples / self.batch_size))

    @property
    def num_train_examples(self) -> int:
        """The training examples of every client together (the sum of ``client_size``), without a pass over them."""
        offsets = self._client_indices.offsets
        return int(offsets[-1] - offsets[0])

    @property
    def train_x(self) -> Tensor:
        """An in-memory dataset's training features (on the device when ``on_device``)."""
        return self._tensors.train_x

    @property
    def train_y(self) -> Tensor:
        """An in-memory dataset's training labels."""
        return self._tensors.train_y

    @property
    def has_validation(self) -> bool:
        """Whether a validation split is held out (``val_fraction`` > 0)."""
        return len(self._source.val_indices) > 0

    @property
    def val_indices(self) -> Tensor:
        """The validation split: indices of training examples no client holds."""
        return self._source.val_indices

    @property
    def val_x(self) -> Tensor:
        """An in-memory dataset's validation features."""
        return self._tensors.train_x[self.val_indices]

    @property
    def val_y(self) -> Tensor:
        """An in-memory dataset's validation labels."""
        return self._tensors.train_y[self.val_indices]

    def client_val_indices(self, client_id: int) -> Tensor:
        """One client's held-out share (``client_val_fraction``), which per-client evaluation reads."""
        if self.client_val_fraction == 0:
            return torch.empty(0, dtype=torch.long)
        return self._source.client_eval_indices[client_id]

    @property
    def test_x(self) -> Tensor:
        """An in-memory dataset's test features."""
        return self._tensors.test_x

    @property
    def test_y(self) -> Tensor:
        """An in-memory dataset's test labels."""
        return self._tensors.test_y

    def client_batches(
        self, client_id: int, generator: torch.Generator, epochs: int | None = None, steps: int | None = None
    ) -> Iterator[Batch]:
        """Shuffled (and augmented) batches of one client's data: ``epochs`` passes, or exactly ``steps`` batches."""
        batches = self._source.client_batches(client_id, generator, epochs, steps)
        augmentation = self.augmentation
        return batches if augmentation is None else (_augmented(augmentation, batch, generator) for batch in batches)

    @property
    def in_memory(self) -> TensorBatches | None:
        """The in-memory dataset's batches (None for a dataset read through DataLoaders)."""
        return self._source if isinstance(self._source, TensorBatches) else None

    @property
    def plain_tensors(self) -> TensorBatches | None:
        """The in-memory dataset's batches where ``client_batches`` gives them as they are (not augmented), so that a
        trainer may gather a client's examples itself (``TensorBatches.clients_order``); else None."""
        return self.in_memory if self.augmentation is None else None

    def client_subset(self, client_id: int, positions: Tensor, generator: torch.Generator | None = None) -> Batch:
        """The examples at ``positions`` (0 .. client_size - 1) of one client's data, e.g. a Poisson sample; augmented
        with ``generator`` (None: torch's global RNG)."""
        batch = self._source.client_subset(client_id, positions)
        return batch if self.augmentation is None else _augmented(self.augmentation, batch, generator)

    def test_batches(self, rank: int = 0, world_size: int = 1) -> Iterator[Batch]:
        """Batches of this process's contiguous share of the central test set."""
        return self._source.test_batches(rank, world_size)

    def val_batches(self, rank: int = 0, world_size: int = 1) -> Iterator[Batch]:
        """Batches of this process's contiguous share of the validation split."""
        if not self.has_validation:
            raise ConfigError(
                "data.val_fraction is 0: there is no validation split; set data.val_fraction > 0 (e.g. 0.1), "
                "or evaluate the test set with lightfed test"
            )
        return self._source.val_batches(rank, world_size)

    def client_eval_batches(self, client_id: int) -> Iterator[Batch]:
        """Batches of one client's held-out share (``client_val_fraction`` > 0), else of its training examples, in
        order, for per-client evaluation."""
        return self._source.client_eval_batches(client_id)


def check_not_empty(name: str, splits: TensorSplits | DatasetSplits) -> None:
    """Refuses a dataset without training examples or without test examples (the run's final report reads them),
    before anything is trained."""
    own_val = getattr(splits, "val_indices", None)  # a dataset's own validation examples are no client's
    trained = splits.num_train - (0 if own_val is None else len(own_val))
    for part, count in (("training", trained), ("test", splits.num_test)):
        if count == 0:
            raise ConfigError(f"{name} has no {part} examples: check its settings (size, split, files)")


def _augmented(augmentation: Augmentation, batch: Batch, generator: torch.Generator | None) -> Batch:
    """The batch with its first element (the images) augmented."""
    if not isinstance(batch, (tuple, list)) or not isinstance(batch[0], Tensor) or batch[0].ndim != 4:
        raise ConfigError("data.augmentation needs batches (images, ...) whose images are (batch, C, H, W)")
    images, *rest = batch
    return cast(Batch, (augmentation(images, generator), *rest))
