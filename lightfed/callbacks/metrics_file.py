"""``metrics.jsonl`` beside the TensorBoard events: one JSON line per round, what the comparison tool reads."""

import json

from lightfed.callbacks.base import Callback

METRICS_FILE = "metrics.jsonl"


class MetricsFile(Callback):
    """Appends ``{"round": <rounds done>, <metric>: <value>, ...}`` to ``<run folder>/metrics.jsonl`` after every
    round (process 0), flushed at once; a resumed run appends, and a later line for a round replaces an earlier one.
    A line cut short by a kill is closed when the run resumes, so readers skip it and keep the rest."""

    def on_fit_start(self, trainer) -> None:
        path = trainer.log_dir / METRICS_FILE
        if trainer.fabric.is_global_zero and path.is_file() and not path.read_bytes().endswith(b"\n"):
            with open(path, "a") as file:
                file.write("\n")

    def on_round_end(self, trainer, round: int, metrics: dict[str, float]) -> None:
        if trainer.fabric.is_global_zero:
            with open(trainer.log_dir / METRICS_FILE, "a") as file:
                file.write(json.dumps({"round": trainer.round, **metrics}) + "\n")
