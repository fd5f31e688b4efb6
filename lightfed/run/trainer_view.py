"""``self.trainer`` of a LightningModule that lightfed drives: what a module reads, and nothing it could change."""

from collections.abc import Callable

from lightning.fabric import Fabric


class DiffersByClient(Exception):
    """A read of what differs between the clients of a step computed together (vectorized training)."""


class TrainerView:
    """Read-only state of the process and of the pass the module is in.

    In a client's local training (one client, one round, like a short Lightning fit): ``training`` is true,
    ``current_epoch`` is the local epoch (0, 1, ... within the round), ``global_step`` the client's optimizer steps so
    far in the round, ``round`` and ``client_id`` say which. In an evaluation of the global model ``validating`` or
    ``testing`` is true, ``client_id`` is None and the counters are 0. While several clients' step is computed
    together (``_together``), ``global_step`` is theirs, and reading ``client_id``, or ``current_epoch`` where their
    epochs differ, raises ``DiffersByClient``.
    """

    def __init__(self, fabric: Fabric) -> None:
        self._fabric = fabric
        self._round, self._epoch, self._step, self._stage = 0, 0, 0, ""
        self._client_id: int | None = None
        self._epochs: Callable[[], set[int]] | None = None  # the local epochs of the clients computed together

    def _enter(self, stage: str, round: int = 0, client_id: int | None = None) -> None:
        self._stage, self._round, self._client_id, self._epoch, self._step = stage, round, client_id, 0, 0
        self._epochs = None

    def _together(self, step: int, epochs: Callable[[], set[int]]) -> None:
        """The step ``step`` of several clients computed together, in the local epochs ``epochs()``."""
        self._step, self._epochs = step, epochs

    @property
    def world_size(self) -> int:
        return self._fabric.world_size

    @property
    def global_rank(self) -> int:
        return self._fabric.global_rank

    @property
    def local_rank(self) -> int:
        return self._fabric.local_rank

    @property
    def num_nodes(self) -> int:
        return getattr(self._fabric.strategy, "num_nodes", 1)

    @property
    def is_global_zero(self) -> bool:
        return self._fabric.is_global_zero

    @property
    def round(self) -> int:
        return self._round

    @property
    def client_id(self) -> int | None:
        if self._epochs is not None:
            raise _differs("client_id")
        return self._client_id

    @property
    def current_epoch(self) -> int:
        if self._epochs is not None:
            epochs = self._epochs()
            if len(epochs) > 1:
                raise _differs("current_epoch")
            (self._epoch,) = epochs
        return self._epoch

    @property
    def global_step(self) -> int:
        return self._step

    @property
    def training(self) -> bool:
        return self._stage == "train"

    @property
    def validating(self) -> bool:
        return self._stage == "validate"

    @property
    def testing(self) -> bool:
        return self._stage == "test"

    @property
    def sanity_checking(self) -> bool:
        return False

    @property
    def logger(self) -> None:
        """Modules log through ``self.log``; lightfed's loggers take the reduced values after each round."""
        return None

    @property
    def loggers(self) -> list:
        return []


def _differs(name: str) -> DiffersByClient:
    return DiffersByClient(f"reads trainer.{name} in training_step, which differs between the clients trained together")
