"""MasFL and AdaMasFL through the real asynchronous engine on heterogeneous least-squares clients (full batches)."""

from dataclasses import replace

import numpy as np
import pytest
import torch

from lightfed.asynchronous.delays import Exponential
from lightfed.asynchronous.schedule import Asynchrony
from lightfed.data.module import FederatedDataModule
from lightfed.strategies import AdaMasFL, FedBuff, MasFL
from lightfed.strategies.masfl import MomentumCorrection
from lightfed.trainer import FederatedTrainer
from tests.strategies.test_quadratics import CLIENTS, EXAMPLES, LeastSquares, LeastSquaresClients, _optimum


def _fit(tmp_path, strategy, concurrency: int, buffer: int, rounds: int, steps: int, lr: float = 0.05, start=None):
    model = LeastSquares(lr)
    data = FederatedDataModule(
        LeastSquaresClients(same_curvature=False), batch_size=EXAMPLES, val_fraction=0.0
    )  # full batch
    if start is not None:
        with torch.no_grad():
            model.w.copy_(torch.as_tensor(start, dtype=torch.float32))
    trainer = FederatedTrainer.from_settings(
        asynchrony=Asynchrony(concurrency=concurrency, delays=Exponential()),
        accelerator="cpu",
        rounds=rounds,
        clients_per_round=buffer,
        local_steps=steps,
        local_epochs=None,
        eval_interval=rounds,
        checkpoint_interval=rounds,
        root_dir=str(tmp_path),
        progress_bar=False,
    )
    trainer.fit(model, data, strategy)
    return model.w.detach().double().numpy(), data


class CheckedMasFL(MasFL):
    """Records, after every aggregation, how far c is from the mean of the c_i, and the buffer's staleness."""

    def aggregate(self, params, sums, round, staleness):
        params = super().aggregate(params, sums, round, staleness)
        c_i = torch.stack([self.client_states.get(i, "c") for i in range(self.num_clients)])
        self.gaps = [*getattr(self, "gaps", []), (self.c - c_i.mean(dim=0)).abs().max().item()]
        self.staleness = [*getattr(self, "staleness", []), *staleness]
        return params


class CheckedAdaMasFL(CheckedMasFL, AdaMasFL):
    pass


@pytest.mark.parametrize("strategy", [CheckedMasFL(server_lr=0.5), CheckedAdaMasFL()], ids=["masfl", "adamasfl"])
def test_c_is_the_mean_of_the_client_variates_after_every_aggregation(tmp_path, strategy):
    _fit(tmp_path, strategy, concurrency=5, buffer=2, rounds=12, steps=3)
    assert len(strategy.gaps) == 12 and max(strategy.gaps) <= 1e-6
    assert max(strategy.staleness) >= 2  # the buffers really were stale
    assert strategy.c.abs().max() > 1e-2  # and c is not trivially zero


class RebuiltMasFL(MasFL):
    """Compares g after each aggregation with the direction rebuilt from the clients' trajectories:
    (1 / (eta K S)) sum_i (x_start - x_K,i) = mean_i(-delta_i / local_time_i)."""

    def accumulate(self, sums, update, staleness):
        super().accumulate(sums, update, staleness)
        self.directions = [*getattr(self, "directions", []), -update.delta / update.local_time]

    def aggregate(self, params, sums, round, staleness):
        params = super().aggregate(params, sums, round, staleness)
        rebuilt = torch.stack(self.directions).mean(dim=0)
        self.errors = [*getattr(self, "errors", []), ((self.g - rebuilt).norm() / rebuilt.norm()).item()]
        self.staleness = [*getattr(self, "staleness", []), *staleness]
        self.directions = []
        return params


def test_without_staleness_the_server_direction_equals_the_one_rebuilt_from_client_trajectories(tmp_path):
    masfl = RebuiltMasFL(server_lr=0.5, beta=0.5)
    _fit(tmp_path, masfl, concurrency=3, buffer=3, rounds=6, steps=4)
    assert set(masfl.staleness) == {0}
    assert len(masfl.errors) == 6 and max(masfl.errors) < 1e-5


def test_with_staleness_the_clients_trajectories_no_longer_give_the_server_direction(tmp_path):
    masfl = RebuiltMasFL(server_lr=0.5, beta=0.5)
    _fit(tmp_path, masfl, concurrency=6, buffer=2, rounds=8, steps=4)
    assert max(masfl.staleness) > 0 and max(masfl.errors) > 1e-3  # the server rebuilds from fresh state instead


class RecordingCorrection(MomentumCorrection):
    def adjust(self, grad, params):
        self.points = [*getattr(self, "points", []), params.clone()]
        super().adjust(grad, params)


class MeasuredAdaMasFL(AdaMasFL):
    """Records every local step's length, every ||D_i|| and every server move."""

    def configure_client(self, plan, received):  # the engine configures a round's jobs before training them
        plan = super().configure_client(plan, received)
        rule = RecordingCorrection(plan.rule.beta, plan.rule.offset, normalise=True)
        self.rules = {**getattr(self, "rules", {}), plan.client_id: rule}
        return replace(plan, rule=rule)

    def accumulate(self, sums, update, staleness):
        super().accumulate(sums, update, staleness)
        rule = self.rules.pop(update.client_id)
        points = [*rule.points, rule.points[0] + update.delta]
        self.steps = [
            *getattr(self, "steps", []),
            *[(b - a).norm().item() for a, b in zip(points, points[1:], strict=False)],
        ]
        self.displacements = [*getattr(self, "displacements", []), (update.delta / update.local_time).norm().item()]

    def aggregate(self, params, sums, round, staleness):
        new = super().aggregate(params, sums, round, staleness)
        self.moves = [*getattr(self, "moves", []), (new - params).norm().item()]
        return new


def test_adamasfl_local_steps_have_length_eta_and_the_server_moves_at_most_gamma(tmp_path):
    ada = MeasuredAdaMasFL(eta_mult=30.0)  # long steps, so the trajectory bends
    _fit(tmp_path, ada, concurrency=4, buffer=2, rounds=10, steps=5)
    assert len(ada.steps) == 10 * 2 * 5
    np.testing.assert_allclose(ada.steps, ada.local_lr, rtol=1e-5)
    assert max(ada.displacements) <= 1 + 1e-6 and min(ada.displacements) < 0.999  # an average of unit vectors
    assert len(ada.moves) == 10 and max(ada.moves) <= ada.server_lr * (1 + 1e-6)


def test_heterogeneous_fixed_point_is_kept_by_masfl_and_left_by_fedbuff(tmp_path):
    data = FederatedDataModule(LeastSquaresClients(same_curvature=False), val_fraction=0.0)
    data.setup(0, torch.device("cpu"))
    optimum = _optimum(data)  # with the warm-up, MasFL starts at c_i = grad f_i(x*), c = g = 0
    w_masfl, _ = _fit(tmp_path / "masfl", MasFL(server_lr=1.0, beta=0.5), 4, 2, rounds=30, steps=5, start=optimum)
    w_fedbuff, _ = _fit(tmp_path / "fedbuff", FedBuff(), 4, 2, rounds=30, steps=5, start=optimum)
    scale = np.linalg.norm(optimum)
    assert np.linalg.norm(w_masfl - optimum) / scale < 1e-5
    assert np.linalg.norm(w_fedbuff - optimum) / scale > 1e-2


def test_masfl_converges_to_the_exact_optimum_under_staleness(tmp_path):
    """Every client always in flight (M_c = N): stale packages, yet no heterogeneity bias (FedBuff's: see above)."""
    masfl = CheckedMasFL(server_lr=0.5, beta=0.5)
    w, data = _fit(tmp_path, masfl, concurrency=CLIENTS, buffer=2, rounds=200, steps=5)
    optimum = _optimum(data)
    assert np.mean(masfl.staleness) > 1
    assert np.linalg.norm(w - optimum) / np.linalg.norm(optimum) < 1e-4
