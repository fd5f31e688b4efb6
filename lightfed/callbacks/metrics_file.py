"""``metrics.jsonl`` beside the TensorBoard events: one JSON line per round, what the comparison tool reads."""

import json

from lightfed.callbacks.base import Callback

METRICS_FILE = "metrics.jsonl"


class MetricsFile(Callback):
    """Appends ``{"round": <rounds done>, <metric>: <value>, ...}`` to ``<run folder>/metrics.jsonl`` after every
    round (process 0), flushed at once, once the round's checkpoint is written; a resumed run appends, and a later
    line for a round replaces an earlier one. A line cut short by a kill is closed when the run resumes, so readers
    skip it and keep the rest, and the checkpointed round's line, lost to a kill between the checkpoint and the line,
    is written again from the checkpoint."""

    def on_fit_start(self, trainer) -> None:
        path = trainer.log_dir / METRICS_FILE
        if not trainer.fabric.is_global_zero:
            return
        text = path.read_bytes() if path.is_file() else b""
        with open(path, "a") as file:
            if text and not text.endswith(b"\n"):
                file.write("\n")
            if trainer.round > 0 and f'{{"round": {trainer.round},'.encode() not in text:
                self._write(file, trainer.round, trainer.last_metrics)

    def on_round_end(self, trainer, round: int, metrics: dict[str, float]) -> None:
        if trainer.fabric.is_global_zero:
            with open(trainer.log_dir / METRICS_FILE, "a") as file:
                self._write(file, trainer.round, metrics)

    @staticmethod
    def _write(file, round: int, metrics: dict[str, float]) -> None:
        file.write(json.dumps({"round": round, **metrics}) + "\n")
