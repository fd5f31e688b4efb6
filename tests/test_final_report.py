"""Model selection on the validation split, the test set once at the end: ``val_*`` and ``lightfed validate`` read the
validation split, ``lightfed test`` the test set, and a finished run appends a final record to ``metrics.jsonl``
with the final model's test metrics and those of the round with the best validation metric."""

import json
import os
import signal

import pytest
import torch
import torch.nn.functional as F

from lightfed.callbacks import Callback, EarlyStopping
from lightfed.data import Digits, DirichletPartitioner
from lightfed.data.module import FederatedDataModule
from lightfed.errors import ConfigError
from lightfed.run.evaluation import BestRound
from lightfed.run.run_output import METRICS_FILE
from lightfed.strategies import FedAvg
from tests.conftest import small_data, small_model, small_trainer


def _scores(model, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    """Accuracy and mean cross-entropy of ``model`` on (x, y), computed directly."""
    model.eval()
    with torch.no_grad():
        logits = model(x)
    return (logits.argmax(1) == y).double().mean().item(), F.cross_entropy(logits, y).item()


def _client_examples(data, client_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The examples per-client evaluation reads for one client (its training examples here), together."""
    batches = list(data.client_eval_batches(client_id))
    return torch.cat([x for x, _ in batches]), torch.cat([y for _, y in batches])


def _records(trainer) -> tuple[list[dict], list[dict]]:
    """The round lines and the final records of the run's metrics file."""
    lines = [json.loads(line) for line in (trainer.log_dir / METRICS_FILE).read_text().splitlines()]
    return [line for line in lines if not line.get("final")], [line for line in lines if line.get("final")]


class ZeroedFromRound(FedAvg):
    """FedAvg whose global weights become zero from round ``first`` (0-based) on: a model no better than a constant,
    so that the best validation round comes before it."""

    def __init__(self, first: int) -> None:
        super().__init__()
        self.first = first

    def aggregate(self, params, sums, round):
        new = super().aggregate(params, sums, round)
        return new * 0 if round >= self.first else new


def test_val_metrics_and_validate_read_the_validation_split_and_test_reads_the_test_set(tmp_path):
    model, data = small_model(), small_data()
    metrics = small_trainer(tmp_path).fit(model, data, FedAvg())
    val_acc, val_loss = _scores(model, data.val_x, data.val_y)
    test_acc, test_loss = _scores(model, data.test_x, data.test_y)
    assert metrics["val_acc"] == pytest.approx(val_acc, abs=1e-6) and metrics["val_loss"] == pytest.approx(
        val_loss, rel=1e-5
    )
    validated = small_trainer(tmp_path).validate(small_model(), small_data(), ckpt_path="last")
    assert validated["val_acc"] == pytest.approx(val_acc, abs=1e-6)
    tested = small_trainer(tmp_path).test(small_model(), small_data(), ckpt_path="last")
    assert tested["test_acc"] == pytest.approx(test_acc, abs=1e-6) and tested["test_loss"] == pytest.approx(
        test_loss, rel=1e-5
    )


def test_the_final_record_holds_the_test_metrics_of_the_final_model_and_of_the_best_validation_round(tmp_path, capsys):
    model, data = small_model(), small_data()
    trainer = small_trainer(tmp_path / "run", rounds=4)
    trainer.fit(model, data, ZeroedFromRound(3))
    rounds, (final,) = _records(trainer)
    history = [(line["round"], line["val_acc"]) for line in rounds]
    best_round, best_val = max(history, key=lambda item: item[1])  # the first of the best
    assert [r for r, _ in history] == [1, 2, 3, 4] and best_round < 4  # round 4's weights are zero
    best_model = small_model()  # the run's first best_round rounds, trained again
    small_trainer(tmp_path / "short", rounds=best_round).fit(best_model, small_data(), FedAvg())
    final_scores, best_scores = _scores(model, data.test_x, data.test_y), _scores(best_model, data.test_x, data.test_y)
    per_client = [_scores(model, *_client_examples(data, c))[0] for c in range(data.num_clients)]
    assert final.pop("per_client") == {"clients/val_acc": pytest.approx(per_client, abs=1e-6)}
    assert final == {
        "final": True,
        "round": 4,
        "monitor": "val_acc",
        "best_round": best_round,
        "best_val_acc": best_val,
        "test_acc": pytest.approx(final_scores[0], abs=1e-6),
        "test_loss": pytest.approx(final_scores[1], rel=1e-5),
        "best_test_acc": pytest.approx(best_scores[0], abs=1e-6),
        "best_test_loss": pytest.approx(best_scores[1], rel=1e-5),
        # 8 clients: their worst and best 10 % are one client each
        "clients/val_acc_mean": pytest.approx(sum(per_client) / 8, abs=1e-6),
        "clients/val_acc_std": pytest.approx(torch.tensor(per_client).double().std(correction=0).item(), abs=1e-6),
        "clients/val_acc_worst10": pytest.approx(min(per_client), abs=1e-6),
        "clients/val_acc_best10": pytest.approx(max(per_client), abs=1e-6),
    }
    assert {k: v for k, v in trainer.final_report.items() if k != "per_client"} == final
    printed = capsys.readouterr().out.splitlines()[0]
    assert printed.startswith(
        f"test set, final global model (round 4): test_loss={final_scores[1]:.4g} test_acc={final_scores[0]:.4g}; "
    )
    assert printed.endswith(
        f"; best val_acc {best_val:.4g} in round {best_round}, its global model: test_loss={best_scores[1]:.4g} "
        f"test_acc={best_scores[0]:.4g}; final global model per client, val_acc: mean={final['clients/val_acc_mean']:.4g} "
        f"std={final['clients/val_acc_std']:.4g} worst10={min(per_client):.4g} best10={max(per_client):.4g}"
    )


def test_the_best_rounds_weights_survive_a_resume(tmp_path):
    """The best round is round 1 or 2 (later rounds are zeroed), before the cut: the resumed run's final record
    needs the copy from the checkpoint."""
    straight = small_trainer(tmp_path / "straight", rounds=4)
    straight.fit(small_model(), small_data(), ZeroedFromRound(2))
    small_trainer(tmp_path / "cut", rounds=2).fit(small_model(), small_data(), ZeroedFromRound(2))
    resumed = small_trainer(tmp_path / "cut", rounds=4)
    resumed.fit(small_model(), small_data(), ZeroedFromRound(2), ckpt_path="last")
    (expected,) = _records(straight)[1]
    first, second = _records(resumed)[1]
    assert first["round"] == 2 and second == expected and expected["best_round"] <= 2


def test_a_run_stopped_to_be_resumed_reports_when_it_ends(tmp_path):
    class Preempted(Callback):
        """The cluster's warning while round 1 trains: the run stops after it, to be resumed."""

        def on_client_end(self, trainer, update):
            os.kill(os.getpid(), signal.SIGUSR1)

    stopped = small_trainer(tmp_path, rounds=3, callbacks=[Preempted()])
    stopped.fit(small_model(), small_data(), FedAvg())
    assert _records(stopped)[1] == [] and stopped.final_report == {}
    finished = small_trainer(tmp_path, rounds=3)
    finished.fit(small_model(), small_data(), FedAvg(), ckpt_path="last")
    assert [line["round"] for line in _records(finished)[1]] == [3]


def test_without_a_validation_split_nothing_is_validated_or_selected(tmp_path):
    def no_validation() -> FederatedDataModule:
        return FederatedDataModule(Digits(), DirichletPartitioner(8, alpha=0.5), batch_size=16, val_fraction=0.0)

    model, data = small_model(), no_validation()
    trainer = small_trainer(tmp_path)
    metrics = trainer.fit(model, data, FedAvg())
    assert not [key for key in metrics if key.startswith("val_")]
    (final,) = _records(trainer)[1]
    assert "clients/val_acc_worst10" in final  # the clients' own data is evaluated without a validation split too
    assert {k: v for k, v in final.items() if not k.startswith(("clients/", "per_client"))} == {
        "final": True,
        "round": 3,
        "monitor": "val_acc",
        "test_acc": pytest.approx(_scores(model, data.test_x, data.test_y)[0], abs=1e-6),
        "test_loss": pytest.approx(_scores(model, data.test_x, data.test_y)[1], rel=1e-5),
    }
    with pytest.raises(ConfigError, match="data.val_fraction is 0: there is no validation split"):
        small_trainer(tmp_path).validate(small_model(), no_validation(), ckpt_path="last")
    refused = tmp_path / "refused"
    with pytest.raises(ConfigError, match="EarlyStopping monitors val_acc, but data.val_fraction is 0"):
        small_trainer(refused, callbacks=[EarlyStopping("val_acc")]).fit(small_model(), no_validation(), FedAvg())
    assert not refused.exists()  # refused before the run folder is claimed


def test_best_round_by_hand():
    best = BestRound("val_acc")
    weights = [torch.full((2,), float(r)) for r in range(5)]
    for round, value in zip(range(1, 6), [0.5, 0.7, float("nan"), 0.7, 0.6], strict=False):
        best.update(round, {"val_acc": value}, weights[round - 1], weights[round - 1] + 10)
    assert (best.round, best.value) == (2, 0.7) and torch.equal(best.params, weights[1])  # a tie keeps the first
    best.update(6, {"val_loss": 0.1}, weights[0], weights[0])  # another metric: no change
    assert best.round == 2
    loss = BestRound("val_loss")  # lower is better
    for round, value in [(1, 2.0), (2, 1.0), (3, 1.5)]:
        loss.update(round, {"val_loss": value}, weights[round], weights[round])
    assert (loss.round, loss.value) == (2, 1.0)
    restored = BestRound("val_loss")
    restored.load_state_dict(loss.state_dict(), torch.device("cpu"))
    assert (restored.round, restored.value) == (2, 1.0) and torch.equal(restored.params, weights[2])
    fresh = BestRound("val_acc")  # a checkpoint chosen on another monitor, or written before any evaluation
    fresh.load_state_dict(loss.state_dict(), torch.device("cpu"))
    fresh.load_state_dict(None, torch.device("cpu"))
    assert fresh.round is None and fresh.state_dict() is None
