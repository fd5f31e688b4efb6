"""The distribution over clients in a run's final record and in compare's table, by hand."""

import numpy as np
import pytest

from lightfed.experiments import markdown, summaries
from lightfed.experiments.run_logs import final_clients
from lightfed.run.evaluation import client_distribution, per_client_monitor


def test_client_distribution_by_hand():
    # 11 clients: their worst and best tenth are ceil(1.1) = 2 clients each
    values = np.array([0.9, 0.1, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.2, 1.0])
    stats = client_distribution(values, "clients/val_acc")
    assert stats == {
        "clients/val_acc_mean": pytest.approx(5.7 / 11),
        "clients/val_acc_std": pytest.approx(np.sqrt(np.mean((values - 5.7 / 11) ** 2))),
        "clients/val_acc_worst10": pytest.approx(0.15),
        "clients/val_acc_best10": pytest.approx(0.95),
    }
    losses = client_distribution(np.array([3.0, 1.0, 2.0]), "clients/val_loss")  # for a loss the worst is highest
    assert losses["clients/val_loss_worst10"] == 3.0 and losses["clients/val_loss_best10"] == 1.0


def test_per_client_monitor_of_a_personal_best_round():
    assert per_client_monitor("clients/personal/val_acc_mean") == "val_acc" == per_client_monitor("val_acc")


def _log(final: dict | None, last_round: int = 3) -> dict:
    return {"final_record": final, "last_round": last_round}


def test_final_clients_prefers_the_clients_own_models_and_skips_a_stale_record():
    stats = ("mean", "std", "worst10", "best10")
    record = {"round": 3, **{f"clients/val_acc_{s}": 0.5 for s in stats}}
    assert final_clients(_log(record), "val_acc") == dict.fromkeys(stats, 0.5)
    personal = {**record, **{f"clients/personal/val_acc_{s}": 0.9 for s in stats}}
    assert final_clients(_log(personal), "val_acc") == dict.fromkeys(stats, 0.9)
    assert final_clients(_log(record, last_round=4), "val_acc") is None  # a record older than the last round
    assert final_clients(_log(None), "val_acc") is None


def test_table_shows_the_clients_columns_and_the_fixed_overrides():
    runs = [
        {"final": 0.7, "best": 0.8, "rounds_to_target": None, "wall_time_s": 1.0, "clients": c}
        for c in ({"mean": 0.6, "std": 0.2, "worst10": 0.1, "best10": 0.9}, None)
    ]
    rows = [{"config": "qfedavg", "setting": "defaults", **summaries.summarise_group(runs, 2)}]
    label = markdown.fixed_label({"strategy.init_args.q": "1"}, rounds=5)
    table = markdown.render_table(rows, "val_acc", None, fixed=label)
    header, _, row = table.splitlines()[:3]
    assert header.endswith(
        "| clients' val_acc mean | clients' val_acc std | clients' val_acc worst 10 % | clients' val_acc best 10 % "
        "| time/run (s) | sent/run (MB) |"
    )
    assert "| 0.6000 (1/2) | 0.2000 (1/2) | 0.1000 (1/2) | 0.9000 (1/2) |" in row  # one of two runs has them
    assert table.endswith("\nevery run: strategy.q=1 trainer.rounds=5\n")
