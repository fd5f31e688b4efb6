"""A small character-level LSTM language model trained on dict batches of tokens and their next tokens."""

import torch
from lightning.pytorch.cli import OptimizerCallable
from torch import Tensor, nn

from lightfed.models.classifier import ClassificationModule


class NextTokenLSTM(ClassificationModule):
    """Embedding, LSTM and a linear layer to next-token logits at every position (LEAF's Shakespeare model, small).

    Batches are dicts ``{"tokens": (batch, seq_len), "targets": (batch, seq_len)}`` of int64 token ids (as
    ``NextTokenDataset`` gives them). Every position is one classification: the loss is the cross-entropy over all
    positions and accuracy counts the positions whose most likely next token is the target.

    In a config (with ``MarkovText`` of as many tokens):

    ```yaml
    model:
      class_path: lightfed.models.NextTokenLSTM
      init_args: {vocab_size: 16, embedding_dim: 8, hidden_size: 32}
    ```

    Examples:
        >>> import torch
        >>> from lightfed.models import NextTokenLSTM
        >>> model = NextTokenLSTM(vocab_size=16)
        >>> batch = {"tokens": torch.zeros(2, 5, dtype=torch.long), "targets": torch.ones(2, 5, dtype=torch.long)}
        >>> logits, targets, batch_size = model.logits_and_targets(batch)
        >>> logits.shape, targets.shape, batch_size  # every position of both sequences
        (torch.Size([10, 16]), torch.Size([10]), 2)
    """

    def __init__(
        self,
        vocab_size: int = 16,
        embedding_dim: int = 8,
        hidden_size: int = 32,
        num_layers: int = 1,
        optimizer: OptimizerCallable = lambda params: torch.optim.SGD(params, lr=2.0),
    ) -> None:
        """
        Args:
            vocab_size: Number of distinct tokens.
            embedding_dim: Size of each token's embedding.
            hidden_size: Size of the LSTM's hidden state.
            num_layers: Number of stacked LSTM layers.
            optimizer: Builds the clients' optimizer, as for `ClassificationModule` (here SGD with lr 2.0).
        """
        super().__init__(num_classes=vocab_size, optimizer=optimizer)
        self.embedding = nn.Embedding(vocab_size, embedding_dim)
        self.lstm = nn.LSTM(embedding_dim, hidden_size, num_layers=num_layers, batch_first=True)
        self.head = nn.Linear(hidden_size, vocab_size)

    def forward(self, tokens: Tensor) -> Tensor:
        """Next-token logits (batch, seq_len, vocab_size) of token ids (batch, seq_len)."""
        hidden, _ = self.lstm(self.embedding(tokens))
        return self.head(hidden)

    def logits_and_targets(self, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor, int]:
        """Every position's logits and next token, and the number of sequences."""
        return self(batch["tokens"]).flatten(0, 1), batch["targets"].flatten(), batch["tokens"].size(0)
