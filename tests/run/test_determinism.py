"""``trainer.deterministic``: torch's deterministic algorithms while a run trains, as Lightning's
``Trainer(deterministic=...)``, the previous settings restored after; and the cuDNN settings vectorized training keeps
on a GPU (``exact_convolutions``)."""

import pytest
import torch

from lightfed.callbacks import Callback
from lightfed.errors import ConfigError
from lightfed.run.determinism import deterministic_algorithms
from lightfed.run.settings import Processes
from lightfed.run.vectorizable import exact_convolutions
from lightfed.strategies import FedAvg
from tests.conftest import small_data, small_model, small_trainer


def _torch_settings() -> tuple[bool, bool, bool]:
    return (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        torch.backends.cudnn.benchmark,
    )


@pytest.mark.parametrize(("deterministic", "inside"), [(True, (True, False, False)), ("warn", (True, True, False))])
def test_deterministic_algorithms_hold_while_the_block_runs_and_are_restored_after(deterministic, inside):
    before = _torch_settings()
    torch.backends.cudnn.benchmark = True
    try:
        with pytest.raises(KeyError), deterministic_algorithms(deterministic):
            assert _torch_settings() == inside
            raise KeyError  # restored after a failure too
        assert _torch_settings() == (before[0], before[1], True)
        with deterministic_algorithms(False):
            assert _torch_settings() == (before[0], before[1], True)
    finally:
        torch.backends.cudnn.benchmark = before[2]


class _Seen(Callback):
    def __init__(self) -> None:
        self.seen: list[tuple[bool, bool]] = []

    def on_round_start(self, trainer, round):
        self.seen.append(_torch_settings()[:2])


@pytest.mark.parametrize(("deterministic", "inside"), [("warn", (True, True)), (False, (False, False))])
def test_a_run_trains_with_the_deterministic_setting_and_leaves_torch_as_it_was(tmp_path, deterministic, inside):
    seen = _Seen()
    trainer = small_trainer(tmp_path, rounds=2, deterministic=deterministic, callbacks=[seen])
    trainer.fit(small_model(), small_data(), FedAvg())
    assert seen.seen == [inside, inside]
    assert _torch_settings()[:2] == (False, False)


def test_a_deterministic_setting_other_than_true_false_or_warn_is_refused():
    with pytest.raises(ConfigError, match="trainer.deterministic must be true, false or 'warn', got 'always'"):
        Processes(deterministic="always")  # type: ignore[arg-type]


@pytest.mark.parametrize(("device", "inside"), [("cuda", (True, False, False)), ("cpu", None)])
def test_vectorized_training_on_a_gpu_uses_cudnns_deterministic_float32_convolutions(device, inside):
    cudnn = torch.backends.cudnn
    before = cudnn.deterministic, cudnn.benchmark, cudnn.allow_tf32
    with pytest.raises(KeyError), exact_convolutions(torch.device(device)):
        assert (cudnn.deterministic, cudnn.benchmark, cudnn.allow_tf32) == (inside or before)
        raise KeyError
    assert (cudnn.deterministic, cudnn.benchmark, cudnn.allow_tf32) == before
