"""A run's fingerprint: the settings that must not change when it resumes, kept in its checkpoints and compared
key by key with the settings of a resume (or of an evaluation of the checkpoint)."""

import json
from collections.abc import Mapping
from typing import Any

from lightfed.errors import ConfigError

RESUMABLE = (
    "ckpt_path",
    "trainer.rounds",
    "trainer.eval_interval",
    "trainer.client_eval_interval",
    "trainer.client_eval_clients",
    "trainer.client_eval_finetune_steps",
    "trainer.checkpoint_interval",
    "trainer.progress_bar",
    "trainer.logger",
    "trainer.callbacks",
    "trainer.check_replicas",
    "trainer.accelerator",
    "trainer.devices",
    "trainer.num_nodes",
    "trainer.clients_in_parallel",
    "trainer.collective_timeout",
    "trainer.deterministic",
    "trainer.root_dir",
    "trainer.name",
    "trainer.version",
    "data.eval_batch_size",
    "data.on_device",
    "data.num_workers",
    "data.pin_memory",
)
"""Settings a resume may change (a key and everything under it): how long, how often, where and on what the run goes
on, not what it computes. The number of processes may change: the run is the same on any number of them."""

EVALUATED = (
    "seed_everything",
    "seed",
    "model",
    "data.dataset",
    "data.val_fraction",
    "data.client_val_fraction",
    "data.holdout_draws",
)
"""The settings that decide what an evaluation of a checkpoint computes: the model, the data and the split (which
examples are held out follows the seed); an evaluation compares only these."""


def _covers(keys: tuple[str, ...], key: str) -> bool:
    return any(key == k or key.startswith(k + ".") for k in keys)


def fingerprint(config: Mapping[str, Any]) -> dict[str, str]:
    """``config`` flattened to ``{"a.b.c": json value}`` without the settings a resume may change."""
    flat: dict[str, str] = {}

    def walk(value: Any, key: str) -> None:
        if isinstance(value, Mapping) and value:
            for name, inner in value.items():
                walk(inner, f"{key}.{name}" if key else str(name))
        elif not _covers(RESUMABLE, key):
            flat[key] = json.dumps(value, sort_keys=True, default=str)

    walk(config, "")
    return flat


def check_fingerprint(
    saved: Mapping[str, str] | None, current: Mapping[str, str], checkpoint: str, evaluation: bool = False
) -> None:
    """Refuses, in one line naming the keys, settings that differ from those ``checkpoint`` was written with (for an
    ``evaluation``, only the model, the data and the seed), and a checkpoint that holds no fingerprint."""
    if saved is None:
        raise ConfigError(f"{checkpoint} holds no fingerprint of its run's settings (an older lightfed wrote it)")
    keys = sorted(set(saved) | set(current))
    if evaluation:
        keys = [key for key in keys if _covers(EVALUATED, key)]
    changed = [
        f"{key} {saved.get(key, 'unset')} -> {current.get(key, 'unset')}"
        for key in keys
        if saved.get(key) != current.get(key)
    ]
    if not changed:
        return
    shown = "; ".join(changed[:4]) + (f"; and {len(changed) - 4} more" if len(changed) > 4 else "")
    what = "evaluate it with" if evaluation else "resume it with"
    raise ConfigError(
        f"{checkpoint} was written with other settings ({shown}): {what} the run's own config.yaml"
        + (
            ""
            if evaluation
            else ", or start a new run without --ckpt_path (a resume may change only the settings "
            "docs/guides/checkpoints.md lists)"
        )
    )
