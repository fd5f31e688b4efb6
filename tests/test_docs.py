"""The documentation: its example strategy works as documented, the configs, tests and links it names exist, and the
README stays a short entry point whose config is the quickstart's."""

import re
from pathlib import Path

import torch
import yaml

from lightfed import ClientUpdate, Sums
from lightfed.strategies import ServerContext
from tests.conftest import small_data, small_model, small_trainer

ROOT = Path(__file__).resolve().parents[1]
STRATEGIES_GUIDE = ROOT / "docs" / "guides" / "strategies.md"


def _example_code() -> str:
    section = STRATEGIES_GUIDE.read_text()
    section = section[section.index("## Writing a strategy on the sums path") :]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def _example_strategy_class():
    namespace: dict = {}
    exec(compile(_example_code(), str(STRATEGIES_GUIDE), "exec"), namespace)
    return namespace["UniformAvgM"]


def test_documented_strategy_is_short_and_computes_uniform_mean_with_momentum():
    UniformAvgM = _example_strategy_class()
    assert len(_example_code().splitlines()) <= 40
    strategy = UniformAvgM(server_lr=0.5, momentum=0.5)
    params = torch.tensor([1.0, 1.0, 1.0])
    strategy.setup(ServerContext(params, num_clients=2))
    for step, deltas in enumerate([([2.0, 0.0, 4.0], [0.0, 2.0, 0.0]), ([1.0, 1.0, 1.0], [1.0, 1.0, 1.0])]):
        sums = Sums(strategy.sum_sizes(), torch.device("cpu"))
        for client_id, delta in enumerate(deltas):
            strategy.accumulate(
                sums, ClientUpdate(client_id, torch.tensor(delta), torch.zeros(0), 99, 1, 1.0, torch.tensor(0.0))
            )
        params = strategy.aggregate(params, sums, round=step)
    # v1 = [1, 1, 2], x1 = [1.5, 1.5, 2]; v2 = 0.5 * v1 + [1, 1, 1] = [1.5, 1.5, 2], x2 = x1 + 0.5 * v2
    assert torch.allclose(params, torch.tensor([2.25, 2.25, 3.0]))


def test_documented_strategy_trains_and_resumes_with_its_state(tmp_path):
    UniformAvgM = _example_strategy_class()
    full = small_model()
    small_trainer(tmp_path / "full", rounds=3).fit(full, small_data(), UniformAvgM(momentum=0.5))
    small_trainer(tmp_path / "cut", rounds=1).fit(small_model(), small_data(), UniformAvgM(momentum=0.5))
    resumed = small_model()
    metrics = small_trainer(tmp_path / "cut", rounds=3).fit(
        resumed, small_data(), UniformAvgM(momentum=0.5), ckpt_path="last"
    )
    assert metrics["strategy/velocity_norm"] > 0
    assert all(torch.equal(a, b) for a, b in zip(full.parameters(), resumed.parameters(), strict=True))


def test_readme_is_short_and_its_links_exist():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme)
    local = [target for target in targets if "://" not in target]
    assert local, "the README links the documentation pages"
    assert [target for target in local if not (ROOT / target).exists()] == []


def test_the_tests_the_guarantees_name_exist():
    guarantees = (ROOT / "docs" / "guides" / "guarantees.md").read_text()
    named = set(re.findall(r"`(tests/[\w/]+\.py)(?:::\w+)?`", guarantees))
    assert len(named) >= 10
    assert sorted(path for path in named if not (ROOT / path).is_file()) == []


def named_tests(text: str) -> list[tuple[str, str]]:
    """(file, test) for each `tests/....py::test_x` in ``text``, and for each `::test_y` that follows it in a cell."""
    pairs = []
    for cell in text.split("|"):
        path = None
        for match in re.finditer(r"`(tests/[\w/]+\.py)?::(\w+)`|`(tests/[\w/]+\.py)`", cell):
            path = match.group(1) or match.group(3) or path
            if match.group(2) and path:
                pairs.append((path, match.group(2)))
    return pairs


def test_the_named_tests_are_found_in_their_files():
    assert named_tests("| `tests/a.py::test_x`, `::test_y`, `tests/b.py` | `::test_z` |") == [
        ("tests/a.py", "test_x"),
        ("tests/a.py", "test_y"),
    ]
    guarantees = (ROOT / "docs" / "guides" / "guarantees.md").read_text()
    pairs = named_tests(guarantees)
    assert len(pairs) >= 8
    missing = [
        f"{path}::{name}" for path, name in pairs if not re.search(rf"^def {name}\(", (ROOT / path).read_text(), re.M)
    ]
    assert missing == []


def test_the_readmes_config_is_the_quickstart():
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"## A config.*?```yaml\n(.*?)```", readme, re.S).group(1)
    assert yaml.safe_load(block) == yaml.safe_load((ROOT / "configs" / "quickstart.yaml").read_text())


def test_every_config_the_docs_name_exists():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    named = {path for page in pages for path in re.findall(r"configs/[\w./-]+\.yaml", page.read_text())}
    assert "configs/digits/base.yaml" in named
    assert sorted(path for path in named if not (ROOT / path).is_file()) == []
