"""What strategies, local rules and privacy mechanisms require of a run, and the one check that refuses the rest."""

import pytest
import torch
from jsonargparse import ArgumentError, ArgumentParser

from lightfed.core.requirements import Requirements, Sent
from lightfed.core.transforms import Pipeline
from lightfed.ecado.adaptive_euler import AdaptiveEuler
from lightfed.errors import ConfigError
from lightfed.personalization import FedRep
from lightfed.privacy import DPSGD
from lightfed.schedules import CosineDecay
from lightfed.strategies import (
    AdaMasFL,
    AdaptFed,
    AdaptiveFedECADO,
    FedAvg,
    FedBuff,
    FedECADO,
    FedNova,
    MasFL,
    Scaffold,
    Strategy,
    TrimmedMean,
)
from lightfed.strategies.masfl import MomentumCorrection
from lightfed.strategies.requirements import check_requirements, run_requirements

W = [torch.zeros(2, requires_grad=True)]


def _sgd(momentum=0.0, weight_decay=0.0):
    return torch.optim.SGD(W, lr=0.1, momentum=momentum, weight_decay=weight_decay)


def test_requirements_combine_as_the_union_of_their_needs():
    combined = Requirements(client_state=True, sends=frozenset({"a"})) | Requirements(
        plain_sgd=True, sends=frozenset({"b"})
    )
    assert combined == Requirements(client_state=True, plain_sgd=True, sends=frozenset({"a", "b"}))


def test_requirements_without_a_sent_value_keep_everything_else():
    declared = Requirements(plain_sgd=True, sends=frozenset({Sent("a", "data"), Sent("b", "size"), Sent("c", "kept")}))
    assert declared.without("a", "c") == Requirements(plain_sgd=True, sends=frozenset({Sent("b", "size")}))
    assert declared.without() == declared


def test_what_each_strategy_declares():
    assert FedAvg().requirements == Requirements()
    assert Scaffold().requirements == Requirements(client_state=True, plain_sgd=True)
    assert FedNova().requirements == Requirements(plain_sgd=True, reads_each_update=True)
    assert MasFL().requirements == Requirements(
        client_state=True, plain_sgd=True, no_weight_decay=True, sends=frozenset({Sent("grad_mean", "gradients")})
    )
    assert AdaMasFL().requirements == MasFL().requirements
    assert AdaptFed().requirements.client_state and "probe_loss" in AdaptFed().requirements.sent_names
    assert FedECADO().requirements.sent_names == {"time_scale", "curvature"}
    assert FedECADO(curvature="none", beyond_window="decay").requirements.sent_names == {"time_scale", "decay"}
    assert AdaptiveFedECADO(curvature="diagonal").requirements == AdaptiveEuler.requirements
    assert AdaptiveFedECADO().requirements.sent_names == AdaptiveEuler.requirements.sent_names - {"curvature"}
    assert AdaptiveFedECADO().requirements.chooses_client_steps
    assert not TrimmedMean().requirements.client_state  # sharded: clients train anywhere
    assert MomentumCorrection.requirements.no_weight_decay


def test_privacy_with_accountants_keeps_clients_on_their_process():
    assert not run_requirements(FedAvg()).client_state
    assert run_requirements(FedAvg(), DPSGD(noise_multiplier=1.0)).client_state


class NoPath(Strategy):
    """Only the common base: neither sums, nor shards, nor buffers."""


@pytest.mark.parametrize(
    "strategy, settings, message",
    [
        (NoPath(), {}, "NoPath has no server path: subclass SumsStrategy, ShardedStrategy or AsyncStrategy"),
        (MasFL(), {}, r"MasFL is asynchronous: add an `asynchronous:` section \(e.g. concurrency: 20\) to the config"),
        (
            FedAvg(),
            dict(asynchronous=True),
            "FedAvg is synchronous; with `asynchronous:` use lightfed.strategies.FedBuff",
        ),
        (
            FedBuff(),
            dict(asynchronous=True, privacy=DPSGD(noise_multiplier=1.0)),
            "trainer.privacy is not supported with `asynchronous:` yet",
        ),
        (
            AdaptiveFedECADO(),
            dict(lr_schedule=CosineDecay()),
            "AdaptiveFedECADO chooses its clients' step sizes itself: remove trainer.lr_schedule",
        ),
        (
            Scaffold(),
            dict(optimizer=_sgd(momentum=0.9)),
            r"Scaffold assumes plain SGD local steps \(x <- x - lr g\): the model's optimizer must be torch.optim.SGD with "
            "momentum 0, got SGD with momentum 0.9",
        ),
        (FedNova(), dict(optimizer=torch.optim.Adam(W)), "FedNova assumes plain SGD local steps .* got Adam$"),
        (
            MasFL(),
            dict(asynchronous=True, optimizer=_sgd(weight_decay=1e-4)),
            "MasFL sets the whole local step direction: the model's optimizer needs weight_decay 0, got 0.0001",
        ),
        (  # the transform that needs plain steps is named, not the strategy behind it
            FedAvg(),
            dict(optimizer=_sgd(momentum=0.9), transforms=Pipeline([FedRep(personal=["w"])])),
            "FedRep assumes plain SGD local steps",
        ),
    ],
)
def test_a_run_the_strategy_cannot_do_is_refused_in_one_line(strategy, settings, message):
    optimizer = settings.pop("optimizer", _sgd())
    with pytest.raises(ConfigError, match=message) as error:
        check_requirements(strategy, optimizer, **settings)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(
    "strategy, settings",
    [
        (FedAvg(), dict(optimizer=torch.optim.Adam(W), privacy=DPSGD(noise_multiplier=1.0), lr_schedule=CosineDecay())),
        (Scaffold(), dict(optimizer=_sgd(weight_decay=1e-4))),  # only momentum breaks its control variates
        (MasFL(), dict(asynchronous=True)),
        (FedECADO(), dict(lr_schedule=CosineDecay())),
    ],
)
def test_a_run_the_strategy_can_do_passes(strategy, settings):
    check_requirements(strategy, settings.pop("optimizer", _sgd()), **settings)


@pytest.mark.parametrize(
    "class_path, argument, value",
    [
        ("FedAvg", "weighting", "median"),
        ("AdaptFed", "rp_form", "sum"),
        ("FedECADO", "curvature", "full"),
        ("AdaptiveFedECADO", "damping", "critical"),
        ("AdaptiveFedECADO", "step_limit", "stable"),
    ],
)
def test_a_choice_outside_its_literal_is_refused_by_the_parser(class_path, argument, value):
    """The signature's ``Literal`` is the check: jsonargparse refuses the value before any strategy is built."""
    parser = ArgumentParser(exit_on_error=False)
    parser.add_subclass_arguments(Strategy, "strategy")
    config = {"strategy": {"class_path": f"lightfed.strategies.{class_path}", "init_args": {argument: value}}}
    with pytest.raises(ArgumentError, match=argument):
        parser.parse_object(config)
