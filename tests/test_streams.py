"""Every random stream is keyed from the one registry, ``lightfed.streams``: no module keeps a stream key of its own
(two such keys once collided unnoticed), and the registry's keys are distinct."""

import ast

import pytest

from lightfed.streams import DataStream, SecureAggregationKey, Stream, UserLevelKey
from tests.test_import_graph import ROOT

DERIVED = {"derived_rng", "derived_seed", "derived_seeds"}


def stream_keys(source: str) -> list[str]:
    """The purpose argument of each ``derived_rng``/``derived_seed`` call and the key of each
    ``default_rng([seed, key])`` in ``source``, as written."""
    keys = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if name in DERIVED and len(node.args) > 1 and not isinstance(node.args[1], ast.Starred):  # a key passed on
            keys.append(ast.unparse(node.args[1]))
        elif name == "default_rng" and node.args and isinstance(node.args[0], ast.List):
            keys.extend(ast.unparse(element) for element in node.args[0].elts[1:2])
    return keys


def test_every_stream_of_the_package_is_keyed_from_the_registry():
    keys = {
        f"{path.relative_to(ROOT)}: {key}"
        for path in ROOT.rglob("*.py")
        for key in stream_keys(path.read_text())
        if not key.startswith(("Stream.", "DataStream."))
    }
    assert keys == set(), "stream keys outside lightfed.streams"


def test_a_key_of_a_modules_own_is_found():
    source = "FINETUNE = 4\nrng = derived_rng(seed, FINETUNE, round)\nother = np.random.default_rng([seed, 7])"
    assert stream_keys(source) == ["FINETUNE", "7"]


@pytest.mark.parametrize("registry", [Stream, UserLevelKey, SecureAggregationKey, DataStream])
def test_the_registrys_keys_are_distinct(registry):
    assert len({int(member) for member in registry}) == len(registry)
