"""Settings a personalization run cannot honour are refused in one line (all but APFL's before anything is written)."""

from functools import partial

import lightning as L
import pytest
import torch

from lightfed.errors import ConfigError
from lightfed.models import SmallCNN
from lightfed.personalization import APFL, FedBN, FedPer, FedRep
from lightfed.strategies import CoordinateMedian, FedAvg, FedProx
from tests.conftest import small_trainer
from tests.personalization.conftest import linear_net, pathological_data


def _refused(tmp_path, strategy, model=None, **settings) -> str:
    with pytest.raises(ConfigError) as error:
        small_trainer(tmp_path, rounds=1, **settings).fit(model or linear_net(), pathological_data(6), strategy)
    assert "\n" not in str(error.value)
    return str(error.value)


def test_personal_patterns_must_match_some_but_not_all_parameters(tmp_path):
    assert "match 0 of 650" in _refused(tmp_path, FedPer(FedAvg(), personal=["head.*"]))
    assert "match 650 of 650" in _refused(tmp_path, FedPer(FedAvg(), personal=["net.*"]))
    assert "personal_parameters" in _refused(tmp_path, FedPer(FedAvg()))  # neither patterns nor the attribute


def test_fedbn_needs_batchnorm_and_fedrep_plain_sgd(tmp_path):
    assert "has none" in _refused(tmp_path, FedBN(FedAvg()))
    L.seed_everything(0, verbose=False)
    momentum = SmallCNN(width=4, optimizer=partial(torch.optim.SGD, lr=0.1, momentum=0.9))
    assert "momentum 0.9" in _refused(tmp_path, FedRep(FedAvg(), personal=["net.7.*"]), momentum)


def test_only_the_sums_path_and_apfl_without_an_inner_rule(tmp_path):
    with pytest.raises(ConfigError, match="sums path"):
        FedPer(CoordinateMedian())
    assert "FedAvg, FedAdam" in _refused(tmp_path, APFL(FedProx(mu=0.1)))


def test_evaluation_settings_it_cannot_honour(tmp_path):
    message = _refused(tmp_path, FedAvg(), unseen_clients=4, clients_per_round=4)
    assert "leaves 2 of 6 clients" in message
