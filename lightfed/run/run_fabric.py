"""The run's ``Fabric`` and the seed it is given: both checked before anything starts."""

from lightning.fabric import Fabric

from lightfed.adapters import set_collective_timeout
from lightfed.errors import ConfigError
from lightfed.launcher import quiet_srun_hint
from lightfed.run.settings import Processes

MAX_SEED = 2**32 - 1  # numpy's


def check_seed(seed: int) -> None:
    """Refuses a seed numpy cannot take (Lightning's ``seed_everything`` seeds numpy with it)."""
    if not 0 <= seed <= MAX_SEED:
        raise ConfigError(f"seed_everything must be an integer from 0 to {MAX_SEED}, got {seed}")


def build_fabric(processes: Processes, callbacks: list) -> Fabric:
    """A ``Fabric`` whose collectives wait ``collective_timeout`` seconds; Lightning's refusal as a ``ConfigError``."""
    quiet_srun_hint()
    p = processes
    try:
        fabric = Fabric(
            accelerator=p.accelerator,
            devices=p.devices,
            num_nodes=p.num_nodes,
            precision=p.precision,  # type: ignore[arg-type]
            callbacks=callbacks,
        )
        set_collective_timeout(fabric, p.collective_timeout)
    except (RuntimeError, ValueError, TypeError) as error:  # Lightning's MisconfigurationException: a RuntimeError
        raise ConfigError(
            f"trainer.accelerator {p.accelerator!r} with trainer.devices {p.devices!r}, num_nodes {p.num_nodes}: {error}"
        ) from None
    return fabric
