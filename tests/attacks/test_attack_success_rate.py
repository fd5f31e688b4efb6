"""lightfed.attacks.attack_success_rate: after a round with a validation, hits / count of the global model (the
weights the strategy evaluates) on this process's share of the validation split, summed over the processes."""

from types import SimpleNamespace

import torch

from lightfed.attacks.attack_success_rate import AttackSuccessRate


def _trainer(due: bool = True, has_validation: bool = True, others: tuple[float, float] = (1.0, 3.0)):
    """A trainer as the callback sees it: process 1 of 2; the other process found ``others`` (hits, count)."""
    calls: dict[str, object] = {}
    module = torch.nn.Linear(2, 2)
    module.train()

    def val_batches(rank, world_size):
        calls["val_batches"] = (rank, world_size)
        return iter(["batch"])

    def all_reduce(counts, reduce_op):
        calls["all_reduce"] = (counts.tolist(), reduce_op)
        return counts + torch.tensor(others, dtype=counts.dtype)

    def due_now(interval):
        calls["due"] = interval
        return due

    client = SimpleNamespace(
        module=module,
        data=SimpleNamespace(has_validation=has_validation, val_batches=val_batches),
        flat=SimpleNamespace(load=lambda params, buffers: calls.setdefault("load", (params.clone(), buffers.clone()))),
    )
    trainer = SimpleNamespace(
        due=due_now,
        evaluation=SimpleNamespace(interval=5),
        fabric=SimpleNamespace(global_rank=1, world_size=2, device=torch.device("cpu"), all_reduce=all_reduce),
        workers=SimpleNamespace(reference=client),
        strategy=SimpleNamespace(evaluated=lambda params: params * 2),
        params=torch.tensor([1.0, 2.0]),
        buffers=torch.tensor([3.0]),
    )
    return trainer, client, calls


class _Counts:
    def __init__(self, hits: float, count: float) -> None:
        self.result, self.calls = (hits, count), []

    def __call__(self, module, batches):
        self.calls.append((module, list(batches), module.training))
        return self.result


def test_the_rate_is_the_sum_of_hits_over_the_sum_of_counts_of_the_evaluated_global_model():
    trainer, client, calls = _trainer()
    counts, metrics = _Counts(2.0, 5.0), {"val_acc": 0.5}
    AttackSuccessRate(counts).on_round_end(trainer, 3, metrics)
    assert metrics == {"val_acc": 0.5, "attack/success_rate": 3.0 / 8.0}  # (2 + 1) / (5 + 3)
    assert calls["due"] == 5 and calls["val_batches"] == (1, 2) and calls["all_reduce"] == ([2.0, 5.0], "sum")
    params, buffers = calls["load"]
    assert params.tolist() == [2.0, 4.0] and buffers.tolist() == [3.0]  # strategy.evaluated(params), the run's buffers
    assert counts.calls == [(client.module, ["batch"], False)]  # in eval mode


def test_nothing_is_logged_in_a_round_without_a_validation_or_without_a_validation_split():
    for due, has_validation in [(False, True), (True, False)]:
        trainer, _, calls = _trainer(due=due, has_validation=has_validation)
        counts, metrics = _Counts(1.0, 1.0), {}
        AttackSuccessRate(counts).on_round_end(trainer, 0, metrics)
        assert metrics == {} and counts.calls == [] and "load" not in calls


def test_no_example_of_another_class_than_the_target_gives_a_rate_of_0():
    trainer, _, _ = _trainer(others=(0.0, 0.0))
    metrics: dict[str, float] = {}
    AttackSuccessRate(_Counts(0.0, 0.0)).on_round_end(trainer, 0, metrics)
    assert metrics == {"attack/success_rate": 0.0}
