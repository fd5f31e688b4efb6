"""Per-client evaluation (global, personal, fine-tuned, unseen clients) gives the numbers of a direct computation."""

import json

import numpy as np
import torch
import torch.nn.functional as F

from lightfed.core.seeding import derived_seed, sample_clients
from lightfed.personalization import FedPer
from lightfed.run.evaluation import ClientEvaluation
from lightfed.run.run_output import METRICS_FILE
from lightfed.strategies import FedAvg
from lightfed.streams import Stream
from tests.conftest import small_trainer
from tests.personalization.conftest import linear_net, pathological_data

LR, STEPS, ROUNDS = 0.1, 2, 2


def _accuracy(w: torch.Tensor, batches) -> float:
    """Fraction of the batches' examples a linear model with flat weights ``w`` classifies right."""
    weight, bias = w[:640].view(10, 64), w[640:]
    right = total = 0
    for x, y in batches:
        right += int(((x.flatten(1) @ weight.T + bias).argmax(1) == y).sum())
        total += len(y)
    return right / total


def _fine_tuned(w: torch.Tensor, data, client_id: int, round: int) -> torch.Tensor:
    """``STEPS`` plain SGD steps on the client's shuffled batches, from the stream evaluation draws them from."""
    generator = torch.Generator().manual_seed(derived_seed(0, Stream.FINETUNE, round, client_id))
    for x, y in data.client_batches(client_id, generator, None, STEPS):
        w = w.clone().requires_grad_(True)
        weight, bias = w[:640].view(10, 64), w[640:]
        w = (w - LR * torch.autograd.grad(F.cross_entropy(x.flatten(1) @ weight.T + bias, y), w)[0]).detach()
    return w


def _spread(values: list[float]) -> tuple[float, float, float]:
    return float(np.mean(values)), float(np.percentile(values, 10)), float(np.std(values))


def test_per_client_metrics_match_a_direct_computation(tmp_path):
    data, fedper = pathological_data(8, client_val_fraction=0.3), FedPer(personal=["net.1.bias"])  # a personal bias
    trainer = small_trainer(
        tmp_path,
        rounds=ROUNDS,
        client_eval_interval=ROUNDS,
        client_eval_finetune_steps=STEPS,
        unseen_clients=2,
        clients_per_round=3,
        clients_in_parallel=1,
    )
    metrics = trainer.fit(linear_net(LR), data, FedAvg(), transforms=[fedper])
    seen = {c for r in range(ROUNDS) for c in sample_clients(0, r, 6, 3)}
    assert len(seen) < 6  # some clients of the training population have not trained yet: no personal model
    params, head = trainer.params, fedper.coordinates.params
    expected: dict[str, list[float]] = {
        "clients": [],
        "clients/personal": [],
        "clients/finetuned": [],
        "clients/unseen": [],
        "clients/unseen/finetuned": [],
    }
    for c in range(8):
        batches = list(data.client_eval_batches(c))
        tuned = _accuracy(_fine_tuned(params, data, c, ROUNDS), batches)
        expected["clients"].append(_accuracy(params, batches))
        if c in seen:
            personal = params.clone()
            personal[head] = fedper.client_states.get(c, "personal")
            expected["clients/personal"].append(_accuracy(personal, batches))
            expected["clients/finetuned"].append(tuned)
        else:
            expected["clients/unseen"].append(_accuracy(params, batches))
            expected["clients/unseen/finetuned"].append(tuned)
    for name, values in expected.items():
        mean, p10, std = _spread(values)
        logged = [metrics[f"{name}/val_acc_{key}"] for key in ("mean", "p10", "std")]
        assert np.allclose(logged, [mean, p10, std], rtol=0, atol=1e-6), name  # torchmetrics' accuracy is float32
    assert len(expected["clients/unseen"]) == 2 + 6 - len(seen)


def test_a_client_subset_is_fixed_by_the_seed_and_sorted():
    chosen = ClientEvaluation(clients=5, seed=3).evaluated(20)
    assert chosen == ClientEvaluation(clients=5, seed=3).evaluated(20) == sorted(chosen) and len(set(chosen)) == 5
    assert ClientEvaluation(clients=5, seed=4).evaluated(20) != chosen
    assert ClientEvaluation(clients=30).evaluated(20) == list(range(20))


def test_fine_tuning_in_evaluation_leaves_the_runs_weights_as_they_are(tmp_path):
    def weights(**evaluation) -> torch.Tensor:
        trainer = small_trainer(tmp_path / str(len(evaluation)), rounds=2, clients_per_round=3, **evaluation)
        trainer.fit(linear_net(LR), pathological_data(6, client_val_fraction=0.3), FedAvg())
        return trainer.params

    assert torch.equal(weights(), weights(client_eval_interval=1, client_eval_finetune_steps=STEPS))


def test_a_personalization_run_selects_its_best_round_on_the_clients_personal_models(tmp_path):
    """The best round is the one with the highest mean personal accuracy over clients; the clients that are unseen
    only until first sampled (no ``unseen_clients``) are not logged."""
    trainer = small_trainer(tmp_path, rounds=4, client_eval_interval=1, clients_per_round=3, clients_in_parallel=1)
    data = pathological_data(6, client_val_fraction=0.3)
    trainer.fit(linear_net(LR), data, FedAvg(), transforms=[FedPer(personal=["net.1.bias"])])
    lines = [json.loads(line) for line in (trainer.log_dir / METRICS_FILE).read_text().splitlines()]
    rounds, report = [line for line in lines if not line.get("final")], lines[-1]
    personal = [line["clients/personal/val_acc_mean"] for line in rounds]
    assert report["monitor"] == "clients/personal/val_acc_mean"
    assert report["best_clients/personal/val_acc_mean"] == max(personal)
    assert report["best_round"] == 1 + personal.index(max(personal))
    assert not any(key.startswith("clients/unseen") for line in rounds for key in line)
