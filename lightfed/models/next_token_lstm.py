"""A small character-level LSTM language model trained on dict batches of tokens and their next tokens."""

import torch
import torch.nn.functional as F
from lightning import LightningModule
from torch import Tensor, nn
from torchmetrics.classification import MulticlassAccuracy


class NextTokenLSTM(LightningModule):
    """Embedding, LSTM and a linear layer to next-token logits at every position (LEAF's Shakespeare model, small).

    Batches are dicts ``{"tokens": (batch, seq_len), "targets": (batch, seq_len)}`` of int64 token ids (as
    ``NextTokenDataset`` gives them). The loss is the cross-entropy over all positions; accuracy counts the positions
    whose most likely next token is the target.
    """

    def __init__(
        self,
        vocab_size: int = 16,
        embedding_dim: int = 8,
        hidden_size: int = 32,
        num_layers: int = 1,
        lr: float = 2.0,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
    ) -> None:
        """
        Args:
            vocab_size: Number of distinct tokens.
            embedding_dim: Size of each token's embedding.
            hidden_size: Size of the LSTM's hidden state.
            num_layers: Number of stacked LSTM layers.
            lr: SGD learning rate.
            momentum: SGD momentum.
            weight_decay: SGD weight decay (L2 penalty).
        """
        super().__init__()
        self.save_hyperparameters()
        self.embedding = nn.Embedding(vocab_size, embedding_dim)
        self.lstm = nn.LSTM(embedding_dim, hidden_size, num_layers=num_layers, batch_first=True)
        self.head = nn.Linear(hidden_size, vocab_size)
        self.val_acc = MulticlassAccuracy(vocab_size, average="micro")
        self.test_acc = MulticlassAccuracy(vocab_size, average="micro")

    def forward(self, tokens: Tensor) -> Tensor:
        """Next-token logits (batch, seq_len, vocab_size) of token ids (batch, seq_len)."""
        hidden, _ = self.lstm(self.embedding(tokens))
        return self.head(hidden)

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        """Return the batch's cross-entropy and log it as ``train_loss``."""
        loss = F.cross_entropy(self(batch["tokens"]).flatten(0, 1), batch["targets"].flatten())
        self.log("train_loss", loss, batch_size=batch["tokens"].size(0))
        return loss

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        """Log ``val_loss`` and ``val_acc``."""
        self._evaluate(batch, "val", self.val_acc)

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        """Log ``test_loss`` and ``test_acc``."""
        self._evaluate(batch, "test", self.test_acc)

    def _evaluate(self, batch: dict[str, Tensor], prefix: str, accuracy: MulticlassAccuracy) -> None:
        """Log ``{prefix}_loss`` and update and log the ``{prefix}_acc`` metric."""
        logits, targets = self(batch["tokens"]).flatten(0, 1), batch["targets"].flatten()
        batch_size = batch["tokens"].size(0)
        self.log(f"{prefix}_loss", F.cross_entropy(logits, targets), batch_size=batch_size)
        accuracy.update(logits, targets)
        self.log(f"{prefix}_acc", accuracy, batch_size=batch_size)

    def configure_optimizers(self) -> torch.optim.SGD:
        """Return SGD over all parameters with the configured lr, momentum and weight decay."""
        return torch.optim.SGD(
            self.parameters(),
            lr=self.hparams.lr,
            momentum=self.hparams.momentum,
            weight_decay=self.hparams.weight_decay,
        )
