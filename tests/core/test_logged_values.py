import pytest
import torch
from torchmetrics.classification import MulticlassAccuracy

from lightfed.core.logged_values import LoggedValues
from lightfed.models import SmallCNN
from tests.conftest import quickstart_command


def test_batch_weighted_means_and_metric_compute():
    logged = LoggedValues()
    accuracy = MulticlassAccuracy(3, average="micro")
    logged.log("loss", torch.tensor(1.0), batch_size=1)
    logged.batch = (torch.zeros(3, 2), torch.zeros(3))
    logged.log("loss", torch.tensor(3.0))  # batch size taken from the loop's batch
    accuracy.update(torch.tensor([0, 1, 2, 2]), torch.tensor([0, 1, 1, 1]))
    logged.log("acc", accuracy)
    result = logged.compute()
    assert result == {"loss": (1.0 + 9.0) / 4, "acc": 0.5}
    assert logged.compute() == {}  # a new pass starts empty
    assert accuracy.update_count == 0  # and the metric was reset


def test_attached_routes_module_log_and_restores_it():
    module = SmallCNN()
    logged = LoggedValues()
    with logged.attached(module):
        module.log("x", 2.0)
        module.log_dict({"y": 4.0})
    assert "log" not in vars(module)
    assert logged.compute() == {"x": 2.0, "y": 4.0}


def test_logging_never_writes_to_the_logged_tensors():
    logged = LoggedValues()
    first, second = torch.tensor(2.0), torch.tensor(5.0)
    logged.log("loss", first, batch_size=1)
    logged.log("loss", second, batch_size=1)
    logged.log("loss", first, batch_size=2)
    assert (first.item(), second.item()) == (2.0, 5.0)
    assert logged.compute() == {"loss": (2.0 + 5.0 + 4.0) / 4}


@pytest.mark.slow
def test_a_metric_logged_in_training_step_is_reduced_when_a_process_trains_no_client(tmp_path):
    """One client a round on two processes: every round one process trains nothing, yet joins the metric's sync
    (it used to wait for the other forever); the accuracy is the one-process run's."""
    import os
    import subprocess
    from pathlib import Path

    import yaml

    root = Path(__file__).resolve().parents[2]

    def last_train_acc(devices: int) -> float:
        out = tmp_path / f"devices{devices}"
        subprocess.run(
            quickstart_command(
                out,
                devices,
                "--model",
                "tests.run.metric_model.SmallCNNWithTrainAccuracy",
                clients_per_round=1,
                rounds=3,
            ),
            check=True,
            cwd=root,
            capture_output=True,
            timeout=600,
            env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(root)},
        )
        lines = (out / "quickstart" / "version_0" / "metrics.jsonl").read_text().splitlines()
        return [yaml.safe_load(line)["train_acc"] for line in lines if not line.startswith('{"final"')]

    one, two = last_train_acc(1), last_train_acc(2)
    assert len(one) == 3 and one == two and all(0 < acc <= 1 for acc in one)
