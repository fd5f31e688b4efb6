"""A Hugging Face causal language model (with LoRA adapters) as a next-token client."""

from typing import Any

import torch
from lightning.pytorch.cli import OptimizerCallable
from torch import Tensor
from torchmetrics.classification import MulticlassAccuracy

from lightfed.models.classifier import ClassificationModule
from lightfed.models.lora import LoRA
from lightfed.models.transformer_loading import transformer

IGNORED = -100  # a target not scored (padding), as Hugging Face's and torch's cross-entropy skip it


class CausalLM(ClassificationModule):
    """``AutoModelForCausalLM`` from a local folder or a config, trained on next-token batches.

    Batches are dicts ``{"tokens": (batch, seq_len), "targets": (batch, seq_len)}`` of token ids, as
    ``NextTokenDataset`` (``MarkovText``) and ``lightfed.data.hf_transforms.Tokenize`` give them; a target of -100 is
    padding, neither trained on nor scored. Every position is one classification over the vocabulary, as in
    ``NextTokenLSTM``. With ``lora``, only the adapters train and are federated (docs/guides/foundation-models.md).

    In a config (a local model with LoRA adapters):

    ```yaml
    model:
      class_path: lightfed.models.CausalLM
      init_args:
        pretrained: path/to/model
        lora: {class_path: lightfed.models.LoRA, init_args: {r: 8, alpha: 16}}
    ```

    Examples:
        >>> import torch
        >>> from lightfed.models import CausalLM
        >>> config = {"model_type": "llama", "vocab_size": 16, "hidden_size": 16, "intermediate_size": 32,
        ...           "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1}
        >>> model = CausalLM(config=config)
        >>> batch = {"tokens": torch.tensor([[1, 2, 3]]), "targets": torch.tensor([[2, 3, -100]])}  # -100: padding
        >>> logits, targets, batch_size = model.logits_and_targets(batch)
        >>> logits.shape, batch_size
        (torch.Size([3, 16]), 1)
        >>> CausalLM()
        Traceback (most recent call last):
        ...
        lightfed.errors.ConfigError: a transformer model needs exactly one of pretrained (a local folder) and config
    """

    def __init__(
        self,
        pretrained: str | None = None,
        config: dict[str, Any] | None = None,
        lora: LoRA | None = None,
        load_in_4bit: bool = False,
        optimizer: OptimizerCallable = lambda params: torch.optim.AdamW(params, lr=1e-3),
    ) -> None:
        """
        Args:
            pretrained: A local folder of a model (``save_pretrained``'s); nothing is downloaded.
            config: Else the model's config (``{model_type: llama, vocab_size: 64, hidden_size: 32, ...}``), its
                weights drawn from the seed.
            lora: LoRA adapters (``lightfed.models.LoRA``) on the frozen model; null: every weight trains.
            load_in_4bit: Quantize the frozen base to 4 bits (QLoRA, bitsandbytes; a CUDA GPU only).
            optimizer: Builds the clients' optimizer from the trained parameters (AdamW, lr 1e-3, by default).
        """
        net = transformer("AutoModelForCausalLM", pretrained, config, lora, load_in_4bit, "CAUSAL_LM")
        super().__init__(num_classes=net.config.vocab_size, optimizer=optimizer)
        self.net = net
        self.val_acc = MulticlassAccuracy(net.config.vocab_size, average="micro", ignore_index=IGNORED)
        self.test_acc = MulticlassAccuracy(net.config.vocab_size, average="micro", ignore_index=IGNORED)

    def forward(self, tokens: Tensor) -> Tensor:
        """Next-token logits (batch, seq_len, vocab_size)."""
        return self.net(input_ids=tokens).logits

    def logits_and_targets(self, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor, int]:
        """Every position's logits and next token, and the number of sequences."""
        return self(batch["tokens"]).flatten(0, 1), batch["targets"].flatten(), batch["tokens"].size(0)
