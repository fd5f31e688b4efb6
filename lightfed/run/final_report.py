"""The test set, read once at the end of a run: the final model's and the best round's test metrics."""

from typing import Any

from lightning import LightningModule
from lightning.pytorch.utilities.model_helpers import is_overridden
from torch import Tensor

from lightfed.run.evaluation import BestRound, Evaluation


def final_report(
    evaluation: Evaluation, round: int, params: Tensor, buffers: Tensor, best: BestRound
) -> dict[str, Any]:
    """``{"final": true, "round": ..., "monitor": ...}`` with the final model's ``test_step`` metrics (``params``,
    ``buffers`` after ``round`` rounds) and, prefixed ``best_``, the best round, its validation value and its test
    metrics (the final round's weights are tested once)."""
    report: dict[str, Any] = {"final": True, "round": round, "monitor": best.monitor}
    if best.round is not None:
        report.update({"best_round": best.round, f"best_{best.monitor}": best.value})
    if is_overridden("test_step", evaluation.client.module, LightningModule):
        final = evaluation.global_model("test_step", params, buffers)
        report.update(final)
        if best.round is not None:
            tested = final if best.round == round else evaluation.global_model("test_step", best.params, best.buffers)
            report.update({f"best_{k}": v for k, v in tested.items()})
    return report


def logged_part(report: dict[str, Any]) -> dict[str, float]:
    """What the loggers record of the report: the test metrics, the final model's and the best round's."""
    return {k: v for k, v in report.items() if k.startswith(("test_", "best_test_"))}


def summary(report: dict[str, Any]) -> str:
    """The report in one line, as the run prints it."""

    def scores(prefix: str) -> str:
        return " ".join(
            f"{k.removeprefix(prefix)}={v:.4g}" for k, v in report.items() if k.startswith(f"{prefix}test_")
        )

    line = f"test set, final global model (round {report['round']}): {scores('') or 'no test_step'}"
    if "best_round" in report:
        monitor, best = report["monitor"], report["best_round"]
        line += f"; best {monitor} {report[f'best_{monitor}']:.4g} in round {best}, its global model: "
        line += scores("best_") or "no test_step"
    return line
