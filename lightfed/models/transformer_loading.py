"""A Hugging Face ``transformers`` model built from a local folder or from a config, never downloaded."""

from pathlib import Path
from typing import Any

import torch

from lightfed.errors import ConfigError
from lightfed.models.lora import LoRA


def transformer(
    auto_class: str,
    pretrained: str | None,
    config: dict[str, Any] | None,
    lora: LoRA | None,
    load_in_4bit: bool,
    task_type: str,
    **settings: Any,
) -> Any:
    """``transformers.<auto_class>`` from the local folder ``pretrained`` (``from_pretrained`` with
    ``local_files_only``) or built from ``config`` (``{model_type: llama, hidden_size: 32, ...}``, random weights
    from the seed), with ``settings`` (e.g. ``num_labels``) added to its config; with ``lora`` its adapters on the
    frozen rest. ``load_in_4bit``: the base quantized to 4 bits by bitsandbytes (QLoRA), on a CUDA GPU only."""
    import transformers

    if (pretrained is None) == (config is None):
        raise ConfigError("a transformer model needs exactly one of pretrained (a local folder) and config")
    if load_in_4bit and not torch.cuda.is_available():
        raise ConfigError("model.load_in_4bit quantizes with bitsandbytes on a CUDA GPU; on the CPU set it false")
    if load_in_4bit and (pretrained is None or lora is None):
        raise ConfigError("model.load_in_4bit needs pretrained weights (a local folder) and lora adapters to train")
    builder = getattr(transformers, auto_class)
    if config is not None:
        model = _built(builder, config, settings)
    else:
        assert pretrained is not None  # exactly one of the two
        model = _loaded(builder, pretrained, load_in_4bit, settings)
    return model if lora is None else lora.apply(model, task_type)


def _built(builder: Any, config: dict[str, Any], settings: dict[str, Any]) -> Any:
    """``builder``'s model of random weights built from ``config`` (with its ``model_type``) and ``settings``."""
    import transformers

    settings_config = dict(config)
    model_type = settings_config.pop("model_type", None)
    if model_type is None:
        raise ConfigError("model.config needs a model_type (e.g. llama, gpt2, bert), as a config.json has")
    if model_type not in transformers.CONFIG_MAPPING:
        raise ConfigError(
            f"model.config's model_type {model_type!r} is not one of transformers' (e.g. llama, gpt2, bert)"
        )
    try:
        model = builder.from_config(transformers.AutoConfig.for_model(model_type, **settings_config, **settings))
    except (ValueError, TypeError, RuntimeError) as error:  # a size or a setting the model cannot take
        reason = " ".join(f"{type(error).__name__}: {error}".split())
        raise ConfigError(f"model.config: transformers cannot build a {model_type} model from it: {reason}") from error
    return model


def _loaded(builder: Any, pretrained: str, load_in_4bit: bool, settings: dict[str, Any]) -> Any:
    """``builder``'s model from the local folder ``pretrained`` (quantized to 4 bits where ``load_in_4bit``)."""
    import transformers

    folder = Path(pretrained).expanduser()
    if not folder.is_dir():
        raise ConfigError(
            f"model.pretrained {pretrained!r} is not a folder: give a local folder that save_pretrained wrote"
        )
    if not (folder / "config.json").is_file():
        raise ConfigError(
            f"model.pretrained {pretrained!r} has no config.json: give a folder that save_pretrained wrote"
        )
    quantized: dict[str, Any] = {}
    if load_in_4bit:
        quantized["quantization_config"] = transformers.BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.bfloat16
        )
    try:
        model = builder.from_pretrained(str(folder), local_files_only=True, **quantized, **settings)
    except (OSError, ValueError) as error:  # no weights, a corrupt file
        reason = " ".join(f"{type(error).__name__}: {error}".split())
        raise ConfigError(f"model.pretrained {pretrained!r}: {reason}") from error
    if load_in_4bit:
        from peft import prepare_model_for_kbit_training

        model = prepare_model_for_kbit_training(model)
    return model
