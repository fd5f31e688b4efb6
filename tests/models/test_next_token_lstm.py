"""NextTokenLSTM on dict batches: causal logits, logged loss and accuracy, learning a MarkovText federation, and
configs/text/next_token.yaml trained by ``lightfed fit`` on one and two processes."""

import math
from pathlib import Path

import lightning as L
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from lightfed.data import MarkovText, NaturalIdPartitioner
from lightfed.data.module import FederatedDataModule
from lightfed.models import NextTokenLSTM
from lightfed.strategies import FedAvg
from tests.conftest import fit_in_subprocess, small_trainer

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "text" / "next_token.yaml"


class LogRecorder:
    """Stand-in for ``LightningModule.log`` that keeps the last value and batch size of each name."""

    def __init__(self) -> None:
        self.logged: dict[str, tuple[object, int]] = {}

    def __call__(self, name: str, value: object, batch_size: int) -> None:
        self.logged[name] = (value, batch_size)


def test_logits_at_a_position_depend_only_on_the_tokens_up_to_it() -> None:
    torch.manual_seed(0)
    model = NextTokenLSTM(vocab_size=5, embedding_dim=4, hidden_size=6)
    tokens = torch.randint(5, (3, 7))
    changed = tokens.clone()
    changed[:, 4] = (changed[:, 4] + 1) % 5
    with torch.no_grad():
        logits, logits_changed = model(tokens), model(changed)
    assert logits.shape == (3, 7, 5)
    assert torch.equal(logits[:, :4], logits_changed[:, :4])
    assert (logits[:, 4:] - logits_changed[:, 4:]).abs().amin(-1).amax() > 0


def test_steps_log_the_cross_entropy_and_accuracy_of_every_position() -> None:
    torch.manual_seed(0)
    model = NextTokenLSTM(vocab_size=5, embedding_dim=4, hidden_size=6)
    batch = {"tokens": torch.randint(5, (3, 7)), "targets": torch.randint(5, (3, 7))}
    model.log = recorder = LogRecorder()
    with torch.no_grad():
        logits = model(batch["tokens"])
        loss = model.training_step(batch, 0)
        model.validation_step(batch, 0)
    expected = F.cross_entropy(logits.reshape(21, 5), batch["targets"].reshape(21))
    assert torch.allclose(loss, expected) and recorder.logged["train_loss"] == (loss, 3)
    assert torch.allclose(recorder.logged["val_loss"][0], expected)
    accuracy = (logits.argmax(-1) == batch["targets"]).float().mean()
    assert recorder.logged["val_acc"] == (model.val_acc, 3)
    assert torch.allclose(model.val_acc.compute(), accuracy)


def chain_losses(source: MarkovText, seed: int) -> tuple[float, float]:
    """Cross-entropy on the test windows (order 1) of each writer's own chain (no model does better on average) and
    of the writers' mean chain (what one shared model can aim at)."""
    splits = source.load(seed)
    chains = source.transitions(np.random.default_rng(seed))
    windows, writers = splits.test.windows.numpy(), splits.test.client_ids
    own = chains[writers[:, None], windows[:, :-1], windows[:, 1:]]
    shared = chains.mean(0)[windows[:, :-1], windows[:, 1:]]
    return float(-np.log(own).mean()), float(-np.log(shared).mean())


def test_a_federation_of_writers_learns_most_of_what_their_text_allows(tmp_path) -> None:
    """From uniform guessing (log 16) towards the writers' mean chain, FedAvg closes 70% of the gap in 10 rounds."""
    source = MarkovText()
    data = FederatedDataModule(
        source, NaturalIdPartitioner(), batch_size=16, val_fraction=0.0
    )  # trains on every window
    L.seed_everything(0, verbose=False)
    model = NextTokenLSTM()
    trainer = small_trainer(tmp_path, rounds=10, clients_per_round=5, local_steps=None, local_epochs=2)
    trainer.fit(model, data, FedAvg())
    tested = trainer.final_report  # the chain losses are those of the test windows
    uniform, (own, shared) = math.log(16), chain_losses(source, seed=0)
    assert own < shared < uniform - 0.5
    assert own < tested["test_loss"] < shared + 0.3 * (uniform - shared)
    assert tested["test_acc"] > 0.35  # uniform guessing: 1/16


@pytest.mark.slow
def test_the_text_config_trains_to_the_same_weights_on_two_processes(tmp_path) -> None:
    def final_checkpoint(devices: int) -> dict:
        root = tmp_path / f"devices{devices}"
        fit_in_subprocess(CONFIG, root, devices, "--trainer.rounds", "3")
        return torch.load(root / "next_token" / "version_0" / "checkpoints" / "last.ckpt", weights_only=False)

    one, two = final_checkpoint(1), final_checkpoint(2)
    assert one["round"] == two["round"] == 3
    assert (one["params"] - two["params"]).abs().max() <= 1e-5
    L.seed_everything(0, verbose=False)
    initial = torch.cat([p.detach().flatten() for p in NextTokenLSTM().parameters()])  # the CLI's model, seed 0
    assert (one["params"] - initial).abs().max() > 1e-2
