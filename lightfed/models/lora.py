"""LoRA adapters (PEFT's) on a frozen Hugging Face model, and FFA-LoRA, whose average over clients is exact."""

from typing import Any

from torch import nn

from lightfed.errors import ConfigError


class LoRA:
    """PEFT's LoRA (Hu et al. 2022): each target layer W x becomes W x + (alpha / r) B A x with W frozen, A (r x in)
    drawn at random and B (out x r) zero at the start; only A and B (and the task's head) train and are federated.

    Averaging A and B separately is not the average of the clients' products: mean(B_i) mean(A_i) != mean(B_i A_i).
    ``train_a: false`` is FFA-LoRA (Sun et al. 2024, "Improving LoRA in privacy-preserving federated learning"): A
    stays at its initialisation, the same on every client (drawn from the run's seed), and only B trains, so
    mean(B_i) A = mean(B_i A) and FedAvg over B is the exact average of the clients' adapters.

    In a config, as a transformer model's ``lora`` (FFA-LoRA here):

    ```yaml
    model:
      class_path: lightfed.models.SequenceClassifier
      init_args:
        num_classes: 8
        pretrained: path/to/model
        lora: {class_path: lightfed.models.LoRA, init_args: {r: 4, alpha: 8, target_modules: [q_proj, v_proj], train_a: false}}
    ```

    Examples:
        >>> from lightfed.models import LoRA
        >>> LoRA(r=4, alpha=8, target_modules=["q_proj", "v_proj"], train_a=False)
        LoRA(r=4, alpha=8, target_modules=['q_proj', 'v_proj'], dropout=0.0, train_a=False)
        >>> LoRA(r=0)
        Traceback (most recent call last):
        ...
        lightfed.errors.ConfigError: LoRA needs r >= 1, alpha > 0 and dropout in [0, 1), got 0, 16, 0.0
    """

    def __init__(
        self,
        r: int = 8,
        alpha: int = 16,
        target_modules: str | list[str] = "all-linear",
        dropout: float = 0.0,
        train_a: bool = True,
    ) -> None:
        """
        Args:
            r: The adapters' rank.
            alpha: Their scale is alpha / r.
            target_modules: The layers that get adapters: names (``["q_proj", "v_proj"]``), or "all-linear".
            dropout: Dropout on the adapters' input, drawn from each client's own seed.
            train_a: False: FFA-LoRA, A frozen at its shared initialisation, only B trained and federated.
        """
        if r < 1 or alpha <= 0 or not 0.0 <= dropout < 1.0:
            raise ConfigError(f"LoRA needs r >= 1, alpha > 0 and dropout in [0, 1), got {r}, {alpha}, {dropout}")
        self.r, self.alpha, self.target_modules, self.dropout, self.train_a = r, alpha, target_modules, dropout, train_a

    def apply(self, model: nn.Module, task_type: str) -> nn.Module:
        """``model`` with adapters (a ``peft.PeftModel``: its base frozen; the task's head, if any, trained)."""
        from peft import LoraConfig, get_peft_model

        config = LoraConfig(
            task_type=task_type,
            r=self.r,
            lora_alpha=self.alpha,
            target_modules=self.target_modules,
            lora_dropout=self.dropout,
        )
        adapted = get_peft_model(model, config)  # type: ignore[arg-type]
        if not self.train_a:
            for name, parameter in adapted.named_parameters():
                if ".lora_A." in name:
                    parameter.requires_grad_(False)
        return adapted

    def __repr__(self) -> str:  # the run's fingerprint and hyperparameters hold it as text
        fields: dict[str, Any] = dict(
            r=self.r, alpha=self.alpha, target_modules=self.target_modules, dropout=self.dropout, train_a=self.train_a
        )
        return f"LoRA({', '.join(f'{k}={v!r}' for k, v in fields.items())})"
