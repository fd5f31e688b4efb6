"""A client model that logs a torchmetrics object in training_step, for the two-process tests (by class path)."""

import torch.nn.functional as F
from torchmetrics.classification import MulticlassAccuracy

from lightfed.models import SmallCNN


class SmallCNNWithTrainAccuracy(SmallCNN):
    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.train_acc = MulticlassAccuracy(self.hparams.num_classes, average="micro")

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.train_acc.update(logits, y)
        self.log("train_acc", self.train_acc)
        return F.cross_entropy(logits, y)
