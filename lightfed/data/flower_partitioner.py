"""Flower Datasets' partitioners (``flwr_datasets.partitioner``) as lightfed partitioners, by name."""

import importlib
import inspect
from typing import Any

import numpy as np

from lightfed.data.partitioners import Partitioner
from lightfed.errors import ConfigError

LABEL, CLIENT_ID = "label", "client_id"  # the columns a Flower partitioner's partition_by names


class FlowerPartitioner(Partitioner):
    """Any partitioner of Flower Datasets (``pip install 'lightfed[flwr]'``), given the training examples' labels as
    the column ``label`` and their natural client ids as ``client_id`` (so ``partition_by: label`` or ``client_id``):
    the clients are Flower's partitions, in Flower's order, exactly as Flower makes them. Where the Flower partitioner
    takes a ``seed`` that ``options`` does not set, it gets the run's seed. Empty partitions are refused.

    In a config:

    ```yaml
    data:
      partitioner:
        class_path: lightfed.data.FlowerPartitioner
        init_args:
          partitioner: DirichletPartitioner
          options: {num_partitions: 20, partition_by: label, alpha: 0.5}
    ```

    Examples:
        >>> from lightfed.data import FlowerPartitioner
        >>> options = {"num_partitions": 20, "partition_by": "label", "alpha": 0.5}
        >>> partitioner = FlowerPartitioner("DirichletPartitioner", options)
        >>> partitioner.num_clients, partitioner.needs_labels
        (20, True)
        >>> FlowerPartitioner("IidPartitioner", {"num_partitions": 4}).needs_labels
        False
    """

    def __init__(self, partitioner: str, options: dict[str, Any] | None = None) -> None:
        """
        Args:
            partitioner: A class of ``flwr_datasets.partitioner`` (``DirichletPartitioner``), or the import path of a
                subclass of its ``Partitioner``; nothing else is called.
            options: The Flower partitioner's arguments (``{num_partitions: 10, partition_by: label, alpha: 0.5}``).
        """
        self.partitioner = partitioner
        self.options = dict(options or {})
        self.num_clients = int(self.options.get("num_partitions", 0))
        self.needs_labels = self.options.get("partition_by") == LABEL

    def partition(self, labels: np.ndarray | None, seed: int, client_ids: np.ndarray | None = None) -> list[np.ndarray]:
        """Flower's partitions of a Dataset of the labels, client ids and example positions."""
        try:
            import datasets
        except ImportError:
            raise ConfigError("FlowerPartitioner needs Flower Datasets: pip install 'lightfed[flwr]'") from None
        flower = self._flower_partitioner(seed)
        by = self.options.get("partition_by")
        if by == CLIENT_ID and client_ids is None or by == LABEL and labels is None:
            raise ConfigError(f"FlowerPartitioner partitions by {by} but the dataset gives none")
        size = len(labels) if labels is not None else len(client_ids) if client_ids is not None else 0
        columns: dict[str, Any] = {"position": np.arange(size)}
        if labels is not None:
            columns[LABEL] = labels
        if client_ids is not None:
            columns[CLIENT_ID] = client_ids
        flower.dataset = datasets.Dataset.from_dict(columns)
        try:
            parts = [np.asarray(flower.load_partition(k)["position"], np.int64) for k in range(flower.num_partitions)]
        except ValueError as error:
            raise ConfigError(f"Flower's {type(flower).__name__}: {' '.join(str(error).split())}") from None
        self.num_clients = len(parts)
        for k, part in enumerate(parts):
            if len(part) == 0:
                raise ConfigError(f"Flower's {type(flower).__name__} leaves client {k} empty; change its options")
        return [np.sort(part) for part in parts]

    def split(self, labels: np.ndarray, seed: int) -> list[np.ndarray]:
        return self.partition(labels, seed)

    def _flower_partitioner(self, seed: int) -> Any:
        """The Flower partitioner named, built with ``options`` (and the run's seed where it takes one)."""
        module, _, name = self.partitioner.rpartition(".")
        try:
            from flwr_datasets.partitioner import Partitioner as FlowerBase

            flower_class = getattr(importlib.import_module(module or "flwr_datasets.partitioner"), name)
        except ImportError:
            raise ConfigError("FlowerPartitioner needs Flower Datasets: pip install 'lightfed[flwr]'") from None
        except AttributeError:
            raise ConfigError(f"flwr_datasets.partitioner has no {self.partitioner}") from None
        if not (inspect.isclass(flower_class) and issubclass(flower_class, FlowerBase)):
            raise ConfigError(
                "FlowerPartitioner's partitioner must name a Partitioner class of Flower Datasets "
                f"(flwr_datasets.partitioner), got {self.partitioner!r}"
            )
        options = dict(self.options)
        if "seed" in inspect.signature(flower_class).parameters and "seed" not in options:
            options["seed"] = seed
        try:
            return flower_class(**options)
        except (TypeError, ValueError) as error:
            raise ConfigError(f"Flower's {name}({options}): {error}") from None
