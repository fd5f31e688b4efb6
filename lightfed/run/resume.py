"""Which checkpoint a run resumes from, and whether it may."""

from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from lightning import LightningModule
from lightning.fabric import Fabric

from lightfed.data.module import FederatedDataModule
from lightfed.errors import ConfigError
from lightfed.run.checkpoint import resolve_checkpoint
from lightfed.run.client import configured_optimizer
from lightfed.run.fingerprint import check_fingerprint, fingerprint
from lightfed.run.run_folder import version_folder
from lightfed.run.run_state import RunState

MONITOR = "trainer.monitor"  # the fingerprint's key of the metric the best round is chosen on


def checkpoint_to_resume(fabric: Fabric, ckpt_path: str | None, experiment: Path, version: int | None) -> Path | None:
    """The checkpoint file ``ckpt_path`` names (found by process 0), None for a fresh start; "last" is the run
    ``version`` names when it is set. A collective call."""
    runs = "*" if version is None else version_folder(Path(), version).name
    path = resolve_checkpoint(ckpt_path, experiment, runs) if fabric.is_global_zero else None
    return fabric.broadcast(path)


def _class_name(component: object) -> str:
    return f"{type(component).__module__}.{type(component).__qualname__}"


def _optimizer(model: LightningModule) -> dict[str, Any]:
    """The optimizer ``configure_optimizers`` builds, as a config would name it (hyperparameters leave it out)."""
    optimizer = configured_optimizer(model)
    return {"class_path": _class_name(optimizer), "init_args": optimizer.defaults}


def run_fingerprint(
    run_config: str | None,
    seed: int,
    model: LightningModule,
    data: FederatedDataModule,
    strategy: object | None,
    trainer: dict[str, Any],
) -> dict[str, str]:
    """What must not change on a resume: the run's whole config but the settings a resume may change; from Python,
    the seed, the classes of the model, dataset, partitioner and strategy, the model's hyperparameters and optimizer, the numbers
    of clients, the ``trainer`` settings given (clients per round, local work) and the split's fractions."""
    if run_config is not None:
        return fingerprint(yaml.safe_load(run_config))
    return fingerprint(
        {
            "seed": seed,
            "model": {
                "class_path": _class_name(model),
                "init_args": {**model.hparams, "optimizer": _optimizer(model)},
            },
            "data": {
                "dataset": _class_name(data.dataset),
                "partitioner": _class_name(data.partitioner),
                "num_clients": data.num_clients,
                "val_fraction": data.val_fraction,
                "client_val_fraction": data.client_val_fraction,
            },
            "strategy": None if strategy is None else _class_name(strategy),
            "trainer": trainer,
        }
    )


def resume_line(run: Path | None, round: int, rounds: int, started_for: int | None) -> str:
    """What a resume says: ``resuming <run> from round 18 of 20 (started for 150)``, the last part when the run was
    started for another number of rounds."""
    started = "" if started_for in (None, rounds) else f" (started for {started_for})"
    return f"resuming {run} from round {round} of {rounds}{started}"


def check_resume(path: Path, state: RunState, current: dict[str, str], rounds: int, say: Callable[[str], None]) -> bool:
    """Refuses a resume whose settings differ from those of the checkpoint's run (``trainer.monitor`` may change while
    no round has been chosen on it), or with fewer ``rounds`` than it has done; True when the run is already complete
    (nothing to do, ``say``s so)."""
    saved = state.fingerprint
    if saved is not None and state.best_round is None:
        saved, current = ({k: v for k, v in each.items() if k != MONITOR} for each in (saved, current))
    check_fingerprint(saved, current, str(path))
    if state.round > rounds:
        raise ConfigError(
            f"{path} is at round {state.round}, beyond trainer.rounds {rounds}: set trainer.rounds above {state.round} "
            "to continue the run"
        )
    if state.round == rounds:
        say(
            f"the run is complete: {path} is at round {state.round} = trainer.rounds; raise trainer.rounds to continue it"
        )
    return state.round == rounds
