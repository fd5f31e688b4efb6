"""Every file under configs/ parses with lightfed's own parser, in the layers it is meant for: a folder's base.yaml
under each of its other files, the privacy files last, the rest alone. Whatever a layer writes reaches the resolved
config, a later layer winning. Each digits config trains (briefly) to a useful model."""

from pathlib import Path
from typing import Any

import pytest
import yaml

from lightfed.cli import main, run
from tests.conftest import trainer_options

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
ADD_ONS = {  # files added last to a base and one of its overlays
    "privacy/dp-sgd.yaml": ("digits/base.yaml", "digits/fedavg.yaml"),
    "privacy/dp-sgd-budget.yaml": ("digits/base.yaml", "digits/fedavg.yaml"),
    "privacy/secagg.yaml": ("digits/base.yaml", "digits/fedavg.yaml"),
    "privacy/secagg-distributed-dp.yaml": ("digits/base.yaml", "digits/fedavg.yaml"),
    "privacy/user-level-fixed.yaml": ("digits/base.yaml", "digits/fedavg.yaml"),
    "privacy/user-level-adaptive.yaml": ("digits/base.yaml", "digits/fedavg.yaml"),
    **{
        f"adaptfed/dp-sigma2-{s}.yaml": ("adaptfed/cifar10/base.yaml", "adaptfed/cifar10/adaptfed.yaml")
        for s in ("0.01", "0.02", "0.03")
    },
}


def _layers() -> list[tuple[str, ...]]:
    layers = []
    for path in sorted(CONFIGS.rglob("*.yaml")):
        name = str(path.relative_to(CONFIGS))
        base = path.with_name("base.yaml")
        if name in ADD_ONS:
            layers.append((*ADD_ONS[name], name))
        elif name.startswith("strategies/"):  # dataset-independent overlays (tests/test_tutorials.py trains them)
            layers.append(("quickstart.yaml", name))
        elif path.name != "base.yaml":
            layers.append((str(base.relative_to(CONFIGS)), name) if base.exists() else (name,))
    return layers


LAYERS = _layers()


def _written(config: Any, key: str = "") -> dict[str, Any]:
    """The leaves of a config, as {"a.b": value, "list.0.c": value}, without the ``init_args`` level (a config may
    leave it out)."""
    if isinstance(config, list) and config:
        return {k: v for i, inner in enumerate(config) for k, v in _written(inner, f"{key}.{i}").items()}
    if not isinstance(config, dict) or not config:
        return {key: config}
    return {
        k: v
        for name, inner in config.items()
        for k, v in _written(inner, key if name == "init_args" else f"{key}.{name}" if key else name).items()
    }


def _merged(files: tuple[str, ...], configs: Path = CONFIGS) -> dict[str, Any]:
    """The leaves the files write, a later file winning; a class_path a later file changes drops the settings of the
    class before it (jsonargparse keeps only those the new class takes)."""
    merged: dict[str, Any] = {}
    for file in files:
        written = _written(yaml.safe_load((configs / file).read_text()))
        for key, value in written.items():
            if key.endswith(".class_path") and merged.get(key, value) != value:
                merged = {k: v for k, v in merged.items() if not k.startswith(key.removesuffix("class_path"))}
        merged.update(written)
    return merged


def _resolved(capsys, files: tuple[str, ...]) -> dict[str, Any]:
    with pytest.raises(SystemExit) as exit:
        main(["fit", *(arg for file in files for arg in ("--config", str(CONFIGS / file))), "--print_config"])
    printed = capsys.readouterr()
    assert exit.value.code == 0, printed.err
    return _written(yaml.safe_load(printed.out))


def test_every_config_line_fits_in_100_columns():
    long = [
        f"{p.relative_to(CONFIGS)}:{i}"
        for p in CONFIGS.rglob("*.yaml")
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if len(line) > 100
    ]
    assert long == []


def test_every_config_is_layered_and_the_folders_of_overlays_have_a_base():
    covered = {file for files in LAYERS for file in files}
    assert covered == {str(p.relative_to(CONFIGS)) for p in CONFIGS.rglob("*.yaml")}
    assert ("quickstart.yaml",) in LAYERS and ("digits/base.yaml", "digits/fedadam.yaml") in LAYERS


@pytest.mark.parametrize("files", LAYERS, ids=lambda files: "+".join(files))
def test_each_layer_reaches_the_resolved_config(capsys, files):
    resolved = _resolved(capsys, files)
    merged = _merged(files)
    assert {key: resolved.get(key, "missing") for key in merged} == merged
    assert resolved["model.class_path"].startswith("lightfed.models.")
    assert resolved["model.optimizer.class_path"] in ("torch.optim.SGD", "torch.optim.AdamW")  # AdamW: configs/llm
    assert resolved["strategy.class_path"].startswith("lightfed.strategies.")  # privacy, personalization: transforms
    transforms = [v for k, v in resolved.items() if k.startswith("transforms.") and k.endswith(".class_path")]
    assert all(t.startswith(("lightfed.transforms.", "lightfed.personalization.")) for t in transforms)
    assert resolved["trainer.name"] != "lightfed"  # every shipped config names its runs' folder


@pytest.mark.parametrize("files", [f for f in LAYERS if f[-1] in ADD_ONS], ids=lambda files: files[-1])
def test_an_add_on_gives_its_runs_a_folder_of_their_own(capsys, files):
    """A private run never shares the experiment folder of the same run without privacy."""
    assert _resolved(capsys, files)["trainer.name"] != _resolved(capsys, files[:-1])["trainer.name"]


def test_an_overlay_replaces_the_bases_optimizer_settings_and_model_class(capsys):
    """cifar10/fedecado.yaml trades the base's ResNet-18 for VGG-11 and its lr 0.01 for 0.05; the base's other
    settings stay."""
    resolved = _resolved(capsys, ("cifar10/base.yaml", "cifar10/fedecado.yaml"))
    assert resolved["model.class_path"] == "lightfed.models.VGG11"
    assert resolved["model.optimizer.lr"] == 0.05
    assert resolved["model.num_classes"] == 10 and "model.groups" not in resolved
    assert resolved["data.augmentation.padding"] == 4 and resolved["data.batch_size"] == 32


@pytest.mark.parametrize("files", [f for f in LAYERS if f[0] == "digits/base.yaml" and len(f) == 2], ids=lambda f: f[1])
def test_digits_config_learns(files, tmp_path):
    configs = [arg for file in files for arg in ("--config", str(CONFIGS / file))]
    metrics = run(
        [
            "fit",
            *configs,
            *trainer_options(rounds=10, root_dir=str(tmp_path), progress_bar="false"),
        ]
    )
    assert metrics["val_acc"] > 0.5  # ten classes: chance is 0.1


def _settings(files: tuple[str, ...], configs: Path) -> dict[tuple[str, str], Any]:
    """The settings the last file writes, each keyed by (the class it configures, its key), over what the files
    before it set: ``strategy.tolerance`` of FedECADO and of AdaptiveFedECADO are two settings."""
    merged = _merged(files, configs)
    written = _written(yaml.safe_load((configs / files[-1]).read_text()) or {})

    def owner(key: str) -> str:
        parts = key.split(".")
        for end in range(len(parts) - 1, 0, -1):
            path = ".".join(parts[:end]) + ".class_path"
            if path in merged:
                return str(merged[path])
        return ""

    return {(owner(key), key): value for key, value in written.items()}


def repeated_settings(configs: Path = CONFIGS) -> list[str]:
    """Settings an overlay writes with the value its folder's base.yaml already gives, and settings every overlay of
    a folder writes with the same value (they belong in the base); run names aside."""
    found = []
    for base in sorted(configs.rglob("base.yaml")):
        folder = base.parent.relative_to(configs)
        overlays = [p for p in sorted(base.parent.glob("*.yaml")) if p.name != "base.yaml"]
        base_values = _written(yaml.safe_load(base.read_text()) or {})
        settings = {}
        for overlay in overlays:
            files = (str(base.relative_to(configs)), str(overlay.relative_to(configs)))
            settings[overlay.name] = own = _settings(files, configs)
            found += [
                f"{folder}/{overlay.name}: {key} repeats the base"
                for (_, key), v in own.items()
                if base_values.get(key, object()) == v and not key.startswith("trainer.name")
            ]
        if len(settings) > 1:
            common = set.intersection(*({(k, repr(v)) for k, v in own.items()} for own in settings.values()))
            found += [f"{folder}: every overlay sets {key[1]}" for key, _ in common if key[1] != "trainer.name"]
    return sorted(found)


def test_no_setting_is_repeated_across_a_folders_overlays_or_their_base():
    assert repeated_settings() == []


def test_a_repeated_setting_is_found(tmp_path):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "base.yaml").write_text("trainer: {rounds: 5}\n")
    (tmp_path / "x" / "a.yaml").write_text("trainer: {rounds: 5, name: a}\nmodel: {class_path: M, init_args: {k: 2}}\n")
    (tmp_path / "x" / "b.yaml").write_text("trainer: {name: b}\nmodel: {class_path: M, init_args: {k: 2}}\n")
    assert repeated_settings(tmp_path) == [
        "x/a.yaml: trainer.rounds repeats the base",
        "x: every overlay sets model.class_path",
        "x: every overlay sets model.k",
    ]
