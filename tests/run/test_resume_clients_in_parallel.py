"""A resume with another ``clients_in_parallel``: bit for bit where both compute a client's update alike (one at a
time, worker threads, batched matmuls, folded), within rounding where one of them vectorizes under vmap
(docs/guides/checkpoints.md)."""

import pytest
import torch

from lightfed.strategies import FedAvg
from tests.conftest import small_data, small_trainer
from tests.run.test_auto_vectorized import mlp, own_step, own_step_normed


def _resumed_and_whole(root, model, first, then):
    """The weights after 3 rounds of 8 clients resumed at round 1 with ``then`` (the first with ``first``), and those
    of the uninterrupted run with ``first``."""

    def fit(folder, rounds, parallel, ckpt_path=None):
        trainer = small_trainer(root / folder, rounds=rounds, clients_per_round=8, clients_in_parallel=parallel)
        trainer.fit(model(), small_data(), FedAvg(), ckpt_path=ckpt_path)
        return trainer.params

    fit("resumed", 1, first)
    return fit("resumed", 3, then, "last"), fit("whole", 3, first)


@pytest.mark.parametrize(
    ("model", "first", "then"),
    [(mlp, 1, 2), (mlp, 2, "vectorized"), (mlp, "auto", 1), (own_step, 1, "vectorized"), (own_step, "auto", 1)],
    ids=["threads", "batched-matmuls", "auto", "folded", "auto-folded"],
)
def test_one_at_a_time_worker_threads_batched_matmuls_and_folded_resume_to_the_same_bits(tmp_path, model, first, then):
    resumed, whole = _resumed_and_whole(tmp_path, model, first, then)
    assert torch.equal(resumed, whole)


@pytest.mark.parametrize(("first", "then"), [(1, "vectorized"), ("auto", 1)])
def test_a_resume_to_or_from_vectorized_training_under_vmap_ends_within_rounding(tmp_path, first, then):
    resumed, whole = _resumed_and_whole(tmp_path, own_step_normed, first, then)
    assert float((resumed - whole).abs().max() / whole.abs().max()) <= 1e-6
