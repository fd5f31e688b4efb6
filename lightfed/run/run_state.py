"""A run's state: what a checkpoint holds, saved and loaded as one value."""

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from torch import Tensor

from lightfed.errors import ConfigError
from lightfed.run.checkpoint import load_checkpoint, save_checkpoint


@dataclass
class RunState:
    """Everything a run resumes from. ``last.ckpt`` holds it as one flat dict (these names, and the keys the module's
    and the callbacks' ``on_save_checkpoint`` added, kept in ``extra``); what only one process holds is in that
    process's own file, which ``process_states`` names with its checksum."""

    round: int  # rounds done
    params: Tensor  # the global model, flat
    buffers: Tensor
    strategy: dict[str, Any]  # the strategy's state that is the same on every process
    process_states: dict[str, Any] | None  # {"folder", "world_size", "sha256"} of the per-process files, or None
    rng: dict[str, Any]  # process 0's global random generators
    metrics: dict[str, float]  # the last round's
    best_round: dict[str, Any] | None  # ``BestRound.state_dict``
    fingerprint: dict[str, str] | None  # the settings a resume must not change
    source: dict[str, Any]  # where the rounds' jobs come from (the asynchronous schedule)
    transforms: (
        list[dict[str, Any]] | None
    )  # each transform's state (None: a checkpoint from before transforms had one)
    started_for: int | None = None  # trainer.rounds when the run started (None: a checkpoint from before it was kept)
    extra: dict[str, Any] = field(default_factory=dict)

    def checkpoint(self) -> dict[str, Any]:
        """The flat dict ``last.ckpt`` holds (what ``on_save_checkpoint`` and ``on_load_checkpoint`` hooks see)."""
        return {**{f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}, **self.extra}

    @classmethod
    def from_checkpoint(cls, checkpoint: dict[str, Any]) -> "RunState":
        rest = dict(checkpoint)
        named = {f.name: rest.pop(f.name, None) for f in fields(cls) if f.name != "extra"}
        return cls(**named, extra=rest)

    def save(self, path: Path) -> None:
        """Writes ``last.ckpt`` atomically with its checksum, the previous one kept beside it (process 0 only)."""
        save_checkpoint(path, self.checkpoint())

    @classmethod
    def load(cls, path: Path, warn: Callable[[str], None] = print, process_files: bool = True) -> "RunState":
        """The state at ``path``, read without running code and verified (``previous.ckpt`` when ``last.ckpt`` is
        damaged, with a ``warn``ing); ``process_files``: the per-process files it names are verified too."""
        return cls.from_checkpoint(load_checkpoint(path, warn, process_files))

    def weights_for(self, params: Tensor, buffers: Tensor) -> tuple[Tensor, Tensor]:
        """The saved weights on the device and in the dtype of ``params``/``buffers``, refused for another model."""
        if self.params.shape != params.shape or self.buffers.shape != buffers.shape:
            raise ConfigError(
                f"the checkpoint holds {self.params.numel()} parameters, the model has {params.numel()}; "
                "resume with the model configuration the checkpoint was written with"
            )
        return self.params.to(params), self.buffers.to(buffers)
