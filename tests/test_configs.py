"""Every shipped config parses, and each digits config trains (briefly) to a useful model."""

from pathlib import Path

import pytest

from lightfed.cli import main, run

CONFIGS = sorted((Path(__file__).resolve().parents[1] / "configs").rglob("*.yaml"))


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: str(p.relative_to(p.parents[1])))
def test_config_parses(config, capsys):
    with pytest.raises(SystemExit) as exit:
        main(["fit", "--config", str(config), "--print_config"])
    assert exit.value.code == 0 and "class_path" in capsys.readouterr().out


@pytest.mark.parametrize("config", [c for c in CONFIGS if c.parent.name == "digits"], ids=lambda p: p.stem)
def test_digits_config_learns(config, tmp_path):
    metrics = run(["fit", "--config", str(config), "--trainer.rounds", "10", "--trainer.root_dir", str(tmp_path),
                   "--trainer.progress_bar", "false"])
    assert metrics["val_acc"] > 0.5  # ten classes: chance is 0.1
