"""A Hugging Face sequence classifier (with LoRA adapters) as a client."""

from typing import Any

import torch
from lightning.pytorch.cli import OptimizerCallable
from torch import Tensor

from lightfed.models.classifier import ClassificationModule
from lightfed.models.lora import LoRA
from lightfed.models.transformer_loading import transformer


class SequenceClassifier(ClassificationModule):
    """``AutoModelForSequenceClassification`` from a local folder or a config, trained on ``(token ids, label)``
    batches (``(batch, seq_len)`` int64 ids, padded with the config's ``pad_token_id``, which attention skips).

    With ``lora``, the adapters and the new classification head train and are federated; the base stays frozen.

    In a config (a local model with FFA-LoRA adapters):

    ```yaml
    model:
      class_path: lightfed.models.SequenceClassifier
      init_args:
        num_classes: 8
        pretrained: path/to/model
        lora: {class_path: lightfed.models.LoRA, init_args: {r: 4, alpha: 8, train_a: false}}
    ```

    Examples:
        >>> import torch
        >>> from lightfed.models import SequenceClassifier
        >>> config = {"model_type": "llama", "vocab_size": 16, "hidden_size": 16, "intermediate_size": 32,
        ...           "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1, "pad_token_id": 0}
        >>> model = SequenceClassifier(num_classes=3, config=config)
        >>> model(torch.tensor([[5, 6, 0, 0]])).shape, model.pad_token_id  # the padding 0s are not attended to
        (torch.Size([1, 3]), 0)
    """

    def __init__(
        self,
        num_classes: int,
        pretrained: str | None = None,
        config: dict[str, Any] | None = None,
        lora: LoRA | None = None,
        load_in_4bit: bool = False,
        optimizer: OptimizerCallable = lambda params: torch.optim.AdamW(params, lr=1e-3),
    ) -> None:
        """
        Args:
            num_classes: Number of classes (the head's outputs).
            pretrained: A local folder of a model (``save_pretrained``'s); nothing is downloaded.
            config: Else the model's config (``{model_type: llama, pad_token_id: 0, ...}``), its weights drawn from
                the seed.
            lora: LoRA adapters (``lightfed.models.LoRA``) on the frozen model; null: every weight trains.
            load_in_4bit: Quantize the frozen base to 4 bits (QLoRA, bitsandbytes; a CUDA GPU only).
            optimizer: Builds the clients' optimizer from the trained parameters (AdamW, lr 1e-3, by default).
        """
        net = transformer(
            "AutoModelForSequenceClassification", pretrained, config, lora, load_in_4bit, "SEQ_CLS",
            num_labels=num_classes,
        )  # fmt: skip
        super().__init__(num_classes=num_classes, optimizer=optimizer)
        self.net = net
        self.pad_token_id = net.config.pad_token_id

    def forward(self, tokens: Tensor) -> Tensor:
        """Class logits (batch, num_classes)."""
        mask = None if self.pad_token_id is None else tokens.ne(self.pad_token_id)
        return self.net(input_ids=tokens, attention_mask=mask).logits
