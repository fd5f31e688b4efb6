"""Availability, over-selection with a deadline, and mid-round dropout: only online clients are sampled, the deadline
keeps exactly the first finishers (hand-checked), the dropped are counted, and the weights are the same on one and two
processes and across a resume."""

import json

import numpy as np
import pytest
import torch

from lightfed.asynchronous.delays import DelayModel
from lightfed.core.seeding import sample_available_clients
from lightfed.errors import ConfigError
from lightfed.heterogeneity import LocalWork
from lightfed.run.availability import AlwaysOnline, DiurnalAvailability, read_trace
from lightfed.run.available_rounds import AvailableRounds
from lightfed.run.deadline import first_finishers
from lightfed.run.settings import AvailabilitySettings
from lightfed.strategies import FedAvg
from tests.conftest import same_weights_on_two_processes, small_data, small_model, small_trainer, trainer_options

WORK = LocalWork(None, 5, None, False)  # five local steps per client
AVAILABILITY = dict(online_fraction=0.5, day_rounds=4, over_selection=1.5, client_dropout=0.2)


def _rounds(availability, **settings) -> AvailableRounds:
    return AvailableRounds(0, 8, 4, WORK, availability, AvailabilitySettings(**settings))


def test_only_online_clients_are_sampled_from_a_trace(tmp_path):
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps({"1": [[0, 2]], "3": [[0, 5]], "4": [[1, 3]], "6": [[2, 9]]}))
    rounds = _rounds(read_trace(str(trace), 8), trace=str(trace))
    assert [rounds.cohort(r) for r in range(4)] == [[1, 3], [1, 3, 4], [3, 4, 6], [3, 6]]


def test_only_online_clients_are_sampled_in_a_diurnal_day():
    diurnal = DiurnalAvailability(0, 8, 0.5, 4)
    rounds = _rounds(diurnal, online_fraction=0.5, day_rounds=4)
    for r in range(8):
        assert set(rounds.cohort(r)) <= set(diurnal.online(float(r))) and rounds.cohort(r)
    assert {len(diurnal.online(float(r))) for r in range(4)} != {8}  # some clients are offline


def test_the_deadline_keeps_the_first_finishers_that_did_not_drop_out():
    selected, times, out = [1, 3, 5, 7], [4.0, 2.0, 9.0, 1.0], [False, False, False, True]
    assert first_finishers(selected, times, out, 5.0, 2) == [1, 3]  # 7 dropped out, 5 finished late
    assert first_finishers(selected, times, out, 5.0, 1) == [3]  # the first to finish
    assert first_finishers(selected, times, out, None, 3) == [1, 3, 5]  # no deadline: 5 is in time
    assert first_finishers([2, 0], [1.0, 1.0], [False, False], None, 1) == [0]  # a tie: the lower id


class ByIdDurations(DelayModel):
    """A step of client i lasts i + 1: client i finishes five steps at 5 (i + 1)."""

    def duration(self, client_id: int, rng: np.random.Generator) -> float:
        return client_id + 1.0


def test_the_rounds_aggregate_the_first_finishers_of_the_selected_by_hand():
    selected = sample_available_clients(0, 0, list(range(8)), 6)
    assert selected == [0, 2, 3, 4, 5, 6]  # ceil(4 x 1.5) = 6 of the 8, by the seed: they finish at 5, 15, ..., 35
    late = _rounds(AlwaysOnline(8), over_selection=1.5, deadline=20.0, delays=ByIdDurations())
    assert late.cohort(0) == [0, 2, 3]  # 4, 5 and 6 finish past 20
    rounds = _rounds(AlwaysOnline(8), over_selection=1.5, deadline=30.0, delays=ByIdDurations())
    assert rounds.cohort(0) == [0, 2, 3, 4]  # 5 finishes at 30, in time, but after the first 4
    assert rounds.finish(0, torch.zeros(1), torch.zeros(0)) == {
        "round/clients_online": 8.0,
        "round/clients_selected": 6.0,
        "round/clients_aggregated": 4.0,
        "round/clients_dropped": 2.0,
    }


def test_dropped_clients_are_in_the_round_metrics(tmp_path):
    trainer = small_trainer(tmp_path, rounds=2, over_selection=1.5, client_dropout=0.3)
    metrics = trainer.fit(small_model(), small_data(), FedAvg())
    selected, aggregated = metrics["round/clients_selected"], metrics["round/clients_aggregated"]
    assert selected == 6 and metrics["round/clients_dropped"] == selected - aggregated
    assert metrics["round/clients"] == aggregated <= 4


def test_a_resumed_run_ends_with_the_weights_of_the_uninterrupted_one(tmp_path):
    whole = small_trainer(tmp_path / "whole", rounds=3, **AVAILABILITY)
    whole.fit(small_model(), small_data(), FedAvg())
    small_trainer(tmp_path / "halves", rounds=1, **AVAILABILITY).fit(small_model(), small_data(), FedAvg())
    resumed = small_trainer(tmp_path / "halves", rounds=3, **AVAILABILITY)
    resumed.fit(small_model(), small_data(), FedAvg(), ckpt_path="last")
    assert torch.equal(whole.params, resumed.params)


def test_one_and_two_processes_end_with_the_same_weights(tmp_path):
    options = {**AVAILABILITY, "rounds": 2, "local_epochs": "null", "local_steps": 5, "round_deadline": 8.0}
    assert same_weights_on_two_processes(tmp_path, *trainer_options(**options))


@pytest.mark.parametrize(
    ("settings", "line"),
    [
        (dict(over_selection=0.5), "trainer.over_selection must be >= 1"),
        (dict(client_dropout=1.0), "trainer.client_dropout must be in [0, 1)"),
        (dict(round_deadline=0.0), "trainer.round_deadline must be > 0"),
    ],
)
def test_bad_settings_are_refused(tmp_path, settings, line):
    with pytest.raises(ConfigError, match=line.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        small_trainer(tmp_path, **settings)


def test_a_trace_naming_an_unknown_client_is_refused(tmp_path):
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps({"0": [[0, 9]], "12": [[0, 9]]}))
    with pytest.raises(ConfigError, match="names client '12', not one of the 8 clients"):
        read_trace(str(trace), 8)


def test_a_round_without_an_online_client_is_refused_by_its_number(tmp_path):
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps({"0": [[0, 1]], "5": [[0, 1]]}))
    trainer = small_trainer(tmp_path, rounds=2, availability_trace=str(trace))
    with pytest.raises(ConfigError, match="round 2: no client is online at virtual time 1"):
        trainer.fit(small_model(), small_data(), FedAvg())
