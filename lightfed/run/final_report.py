"""The test set, read once at the end of a run: the final model's and the best round's test metrics."""

from typing import Any

from lightning import LightningModule
from lightning.pytorch.utilities.model_helpers import is_overridden
from torch import Tensor

from lightfed.run.evaluation import BestRound, Evaluation, client_distribution, per_client_monitor

PER_CLIENT = "per_client"  # the final record's per-client values: evaluated name -> one value per evaluated client


def final_report(
    evaluation: Evaluation, round: int, params: Tensor, buffers: Tensor, best: BestRound
) -> dict[str, Any]:
    """``{"final": true, "round": ..., "monitor": ...}`` with the final model's ``test_step`` metrics (``params``,
    ``buffers`` after ``round`` rounds) and, prefixed ``best_``, the best round, its validation value and its test
    metrics (the final round's weights are tested once), then the final model's distribution over clients of the
    monitored metric on each client's own data (``clients_report``)."""
    report: dict[str, Any] = {"final": True, "round": round, "monitor": best.monitor}
    if best.round is not None:
        report.update({"best_round": best.round, f"best_{best.monitor}": best.value})
    if is_overridden("test_step", evaluation.client.module, LightningModule):
        final = evaluation.global_model("test_step", params, buffers)
        report.update(final)
        if best.round is not None:
            tested = final if best.round == round else evaluation.global_model("test_step", best.params, best.buffers)
            report.update({f"best_{k}": v for k, v in tested.items()})
    report.update(clients_report(evaluation, round, params, buffers, per_client_monitor(best.monitor)))
    return report


def clients_report(evaluation: Evaluation, round: int, params: Tensor, buffers: Tensor, monitor: str) -> dict[str, Any]:
    """``clients/<monitor>_{mean,std,worst10,best10}`` (``client_distribution``) of the final model on each evaluated
    client's own data (its held-out share with ``data.client_val_fraction`` > 0, else its training examples), and
    of each model per-client evaluation adds (``clients/personal/``, ``clients/finetuned/``), with the values
    themselves under ``per_client``; nothing where ``validation_step`` is not written or does not log ``monitor``."""
    if not is_overridden("validation_step", evaluation.client.module, LightningModule):
        return {}
    values = evaluation.final_clients(round, params, buffers, monitor)
    report: dict[str, Any] = {}
    for name, each in values.items():
        report.update(client_distribution(each, name))
    if values:
        report[PER_CLIENT] = {name: each.tolist() for name, each in values.items()}
    return report


def logged_part(report: dict[str, Any]) -> dict[str, float]:
    """What the loggers record of the report: the test metrics, the final model's and the best round's, and the
    distributions over clients."""
    return {k: v for k, v in report.items() if k.startswith(("test_", "best_test_", "clients/"))}


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
    monitor = per_client_monitor(report["monitor"])
    if f"clients/{monitor}_mean" in report:
        stats = (f"{stat}={report[f'clients/{monitor}_{stat}']:.4g}" for stat in ("mean", "std", "worst10", "best10"))
        line += f"; final global model per client, {monitor}: " + " ".join(stats)
    return line
