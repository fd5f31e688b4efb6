"""LightningModules that use what lightfed promises of any LightningModule: hooks, ``self.trainer``, dict batches."""

from torch import Tensor
from torchmetrics.classification import MulticlassAccuracy

from lightfed.models import SmallCNN


class RecordingCNN(SmallCNN):
    """SmallCNN that records every hook lightfed calls, in order, and what ``self.trainer`` says at a few of them."""

    HOOKS = (
        "on_fit_start",
        "on_fit_end",
        "on_train_start",
        "on_train_end",
        "on_train_epoch_start",
        "on_train_epoch_end",
        "on_before_backward",
        "on_after_backward",
        "on_validation_start",
        "on_validation_end",
        "on_validation_epoch_start",
        "on_validation_epoch_end",
        "on_test_start",
        "on_test_end",
        "on_test_epoch_start",
        "on_test_epoch_end",
    )
    BATCH_HOOKS = ("on_train_batch_start", "on_train_batch_end", "on_validation_batch_start", "on_validation_batch_end")

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.calls: list[str] = []
        self.views: list[tuple] = []
        self.lrs: list[float] = []
        self.saved: list[dict] = []
        self.loaded: list[dict] = []
        for name in self.HOOKS + self.BATCH_HOOKS:
            setattr(self, name, self._recorder(name))

    def _recorder(self, name: str):
        def record(*args) -> None:
            self.calls.append(name)
            if name in ("on_train_batch_start", "on_validation_batch_start"):
                t = self.trainer
                self.views.append(
                    (
                        name,
                        t.round,
                        t.client_id,
                        t.current_epoch,
                        t.global_step,
                        self.current_epoch,
                        self.global_step,
                        t.training,
                        t.validating,
                        t.world_size,
                        t.global_rank,
                    )
                )

        return record

    def on_before_optimizer_step(self, optimizer) -> None:
        self.calls.append("on_before_optimizer_step")
        self.lrs.append(optimizer.param_groups[0]["lr"])

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        self.calls.append("on_save_checkpoint")
        checkpoint["recorded_calls"] = len(self.calls)
        self.saved.append(checkpoint)

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        self.calls.append("on_load_checkpoint")
        self.loaded.append(checkpoint)


class EpochMetricCNN(SmallCNN):
    """Computes an accuracy only in ``on_validation_epoch_end`` (as many modules do) and counts local epochs in
    ``on_train_epoch_end``."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.epoch_acc = MulticlassAccuracy(10, average="micro")

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        super().validation_step(batch, batch_idx)
        x, y = batch
        self.epoch_acc.update(self(x), y)

    def on_validation_epoch_end(self) -> None:
        self.log("val_epoch_acc", self.epoch_acc)

    def on_train_epoch_end(self) -> None:
        self.log("local_epoch_ends", float(self.trainer.current_epoch + 1), batch_size=1)


class DictBatchCNN(SmallCNN):
    """SmallCNN whose batches are dicts ``{"image": x, "label": y}``."""

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        return super().training_step((batch["image"], batch["label"]), batch_idx)

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        super().validation_step((batch["image"], batch["label"]), batch_idx)

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        super().test_step((batch["image"], batch["label"]), batch_idx)
