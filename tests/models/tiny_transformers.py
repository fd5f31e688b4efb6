"""Tiny random Hugging Face models for the transformer clients' tests (built from a config: nothing downloaded)."""

from typing import Any

import lightning as L

from lightfed.models import CausalLM, LoRA, SequenceClassifier

LLAMA: dict[str, Any] = dict(
    model_type="llama",
    vocab_size=16,
    hidden_size=16,
    intermediate_size=32,
    num_hidden_layers=1,
    num_attention_heads=2,
    num_key_value_heads=1,
    max_position_embeddings=32,
)


def causal_lm(seed: int = 0, lora: LoRA | None = None, **settings: Any) -> CausalLM:
    L.seed_everything(seed, verbose=False)
    return CausalLM(config={**LLAMA, **settings}, lora=lora)


def classifier(seed: int = 0, lora: LoRA | None = None, num_classes: int = 3) -> SequenceClassifier:
    L.seed_everything(seed, verbose=False)
    return SequenceClassifier(num_classes, config={**LLAMA, "vocab_size": 17, "pad_token_id": 16}, lora=lora)
