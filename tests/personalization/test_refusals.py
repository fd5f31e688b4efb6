"""Settings a personalization run cannot honour are refused in one line (all but APFL's before anything is written)."""

from functools import partial

import lightning as L
import pytest
import torch

from lightfed.errors import ConfigError
from lightfed.models import SmallCNN
from lightfed.personalization import APFL, Ditto, FedBN, FedPer, FedRep
from lightfed.strategies import CoordinateMedian, FedAvg, FedProx
from tests.conftest import small_trainer
from tests.personalization.conftest import linear_net, pathological_data


def _refused(tmp_path, transform, model=None, strategy=None, **settings) -> str:
    """The one-line refusal of a run of ``strategy`` (FedAvg) behind ``transform`` (None: none)."""
    transforms = [] if transform is None else [transform]
    with pytest.raises(ConfigError) as error:
        small_trainer(tmp_path, rounds=1, **settings).fit(
            model or linear_net(), pathological_data(6), strategy or FedAvg(), transforms=transforms
        )
    assert "\n" not in str(error.value)
    return str(error.value)


def test_personal_patterns_must_match_some_but_not_all_parameters(tmp_path):
    assert "match 0 of 650" in _refused(tmp_path, FedPer(personal=["head.*"]))
    assert "match 650 of 650" in _refused(tmp_path, FedPer(personal=["net.*"]))
    message = _refused(tmp_path, FedPer())  # neither patterns nor the attribute
    assert message.startswith("transforms: FedPer needs") and "FedPer's personal" in message
    assert "personal_parameters" in message


def test_fedbn_needs_batchnorm_and_fedrep_plain_sgd(tmp_path):
    assert "has none" in _refused(tmp_path, FedBN())
    L.seed_everything(0, verbose=False)
    momentum = SmallCNN(width=4, optimizer=partial(torch.optim.SGD, lr=0.1, momentum=0.9))
    assert "momentum 0.9" in _refused(tmp_path, FedRep(personal=["net.7.*"]), momentum)


def test_only_the_sums_path_and_apfl_without_a_strategys_rule(tmp_path):
    message = _refused(tmp_path, FedPer(personal=["net.1.bias"]), strategy=CoordinateMedian())
    assert message.startswith("transforms: FedPer works on the round's sums") and "sums path" in message
    assert "FedAvg, FedAdam" in _refused(tmp_path, APFL(), strategy=FedProx(mu=0.1))


def test_settings_out_of_range_are_refused_under_the_transforms_name():
    for build, message in [
        (lambda: FedRep(head_epochs=0), "transforms: FedRep's head_epochs must be >= 1, got 0"),
        (lambda: Ditto(lam=-1.0), "transforms: Ditto's lam must be >= 0, got -1.0"),
        (lambda: Ditto(personal_epochs=1, personal_steps=2), "transforms: set one of Ditto's personal_epochs"),
        (lambda: APFL(alpha=1.5), r"transforms: APFL's alpha must be in \[0, 1\], got 1.5"),
    ]:
        with pytest.raises(ConfigError, match=f"^{message}"):
            build()


def test_evaluation_settings_it_cannot_honour(tmp_path):
    message = _refused(tmp_path, None, unseen_clients=4, clients_per_round=4)
    assert "leaves 2 of 6 clients" in message
