"""lightfed.local.personal_layers: the client's own values of its personal coordinates written into the live module
before the first step, their values after the last step reported."""

import torch

from lightfed.local.personal_layers import PersonalLayers
from tests.local.conftest import Client, Recorder

W, B = [1.0, -2.0, 0.5], [0.5, 0.25]
PARAMS_MASK, BUFFERS_MASK = torch.tensor([True, False, True]), torch.tensor([False, True])


def test_the_personal_coordinates_are_loaded_before_the_steps_and_reported_after_them():
    client, inner = Client(W, b=B), Recorder()
    rule = PersonalLayers(PARAMS_MASK, BUFFERS_MASK, torch.tensor([10.0, 30.0]), torch.tensor([7.0]), inner)
    rule.start(client.flat.params.clone(), client.context)
    assert client.flat.params.tolist() == [10.0, -2.0, 30.0] and client.flat.buffers.tolist() == [0.5, 7.0]
    ((name, params),) = inner.calls
    assert name == "start" and params.tolist() == [10.0, -2.0, 30.0]  # the inner rule starts from the client's model
    with torch.no_grad():  # the local steps move every coordinate
        client.flat.params.add_(1.0)
        client.flat.buffers.mul_(2.0)
    report = rule.report()
    assert report["personal"].tolist() == [11.0, 31.0] and report["personal_buffers"].tolist() == [14.0]
    assert report["inner"] == 1  # the inner rule's report; its "personal" is the personal layers'
    client.flat.params.zero_()
    assert report["personal"].tolist() == [11.0, 31.0]  # a copy


def test_a_client_without_personal_values_keeps_the_global_models_and_the_inner_rules_steps_run():
    client = Client(W, b=B)
    rule = PersonalLayers(PARAMS_MASK, BUFFERS_MASK, None, None, Recorder(add=2.0))
    rule.start(client.flat.params.clone(), client.context)
    assert client.flat.params.tolist() == W and client.flat.buffers.tolist() == B
    grad = torch.tensor([1.0, 1.0, 1.0])
    rule.adjust(grad, client.flat.params)
    assert grad.tolist() == [3.0, 3.0, 3.0]
    assert rule.report()["personal"].tolist() == [1.0, 0.5] and rule.report()["personal_buffers"].tolist() == [0.25]


def test_without_an_inner_rule_it_reports_only_the_personal_values():
    client = Client(W, b=B)
    rule = PersonalLayers(PARAMS_MASK, BUFFERS_MASK, torch.tensor([0.0, 0.0]), None)
    rule.start(client.flat.params.clone(), client.context)
    report = rule.report()
    assert set(report) == {"personal", "personal_buffers"} and report["personal"].tolist() == [0.0, 0.0]
    assert client.flat.params.tolist() == [0.0, -2.0, 0.0]
