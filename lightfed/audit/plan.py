"""The runs of an audit: for each privacy setting (none, or UserLevelDP at a noise multiplier) a target run with
canaries and the shadow runs of LiRA, each as ``lightfed fit`` arguments."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from lightfed.errors import ConfigError


@dataclass(frozen=True)
class AuditSettings:
    """What every run of an audit shares."""

    configs: tuple[str, ...]
    out: Path
    seed: int = 0
    rounds: int | None = None
    clip: float = 0.5
    canaries: int = 100
    unobserved: int = 100
    null: str = "fitted"
    delta: float = 1e-5
    holdout: float = 0.5
    unseen_clients: int = 20
    shadows: int = 4


@dataclass(frozen=True)
class Setting:
    """One row of the audit: ``noise`` None is the run without DP."""

    noise: float | None

    @property
    def label(self) -> str:
        return "none" if self.noise is None else f"z={self.noise:g}"


def check_configs(configs: tuple[str, ...]) -> None:
    """Raises ``ConfigError`` for a config that is missing, not a YAML mapping, or sets ``transforms:`` (the audit
    sets them)."""
    for config in configs:
        path = Path(config)
        if not path.is_file():
            raise ConfigError(f"audit: config file not found: {config}")
        loaded = yaml.safe_load(path.read_text())
        if not isinstance(loaded, dict):
            raise ConfigError(f"audit: {config} is not a YAML mapping of settings")
        if loaded.get("transforms"):
            raise ConfigError(
                f"audit: {config} sets transforms:, which the audit sets itself (canaries and UserLevelDP): "
                "pass the federation's config without them"
            )


def _transforms(settings: AuditSettings, setting: Setting, shadow: int | None) -> list[dict]:
    """The run's transforms: SilentClients for a shadow, Canaries for a private target, then UserLevelDP."""
    transforms: list[dict] = []
    if shadow is not None:
        transforms.append(
            {
                "class_path": "lightfed.audit.SilentClients",
                "init_args": {"shadow": shadow, "halves_seed": settings.seed},
            }
        )
    if setting.noise is None:
        return transforms
    if shadow is None:
        canaries: dict[str, object] = {
            "count": settings.canaries,
            "unobserved": settings.unobserved,
            "norm": settings.clip,
        }
        canaries |= {"target_delta": settings.delta, "null": settings.null}
        transforms.append({"class_path": "lightfed.audit.Canaries", "init_args": canaries})
    dp: dict[str, object] = {"noise_multiplier": setting.noise, "clip": settings.clip, "target_delta": settings.delta}
    if shadow is not None:  # the target's data and sampling, noise of its own (else LiRA subtracts the target's)
        dp["noise_seed"] = settings.seed + 1 + shadow
    transforms.append({"class_path": "lightfed.transforms.UserLevelDP", "init_args": dp})
    return transforms


def run_argv(settings: AuditSettings, setting: Setting, shadow: int | None) -> list[str]:
    """``lightfed fit`` arguments of the target run (``shadow`` None) or of shadow ``shadow`` of ``setting``."""
    name = f"{setting.label}-{'target' if shadow is None else f'shadow{shadow}'}"
    argv = [arg for config in settings.configs for arg in ("-c", config)]
    argv += ["--seed_everything", str(settings.seed), "--trainer.root_dir", str(settings.out / "runs")]
    argv += ["--trainer.name", name, "--trainer.progress_bar", "false"]
    argv += ["--trainer.unseen_clients", str(settings.unseen_clients)]
    argv += ["--data.client_val_fraction", str(settings.holdout)]
    if settings.rounds is not None:
        argv += ["--trainer.rounds", str(settings.rounds)]
    return [*argv, "--transforms", json.dumps(_transforms(settings, setting, shadow))]


def members(num_clients: int, unseen_clients: int) -> np.ndarray:
    """Whether each client is one the run samples from (the last ``unseen_clients`` never train)."""
    return np.arange(num_clients) < num_clients - unseen_clients
