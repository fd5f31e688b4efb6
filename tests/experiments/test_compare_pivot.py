"""lightfed compare --pivot KEY: the final metric with one column per value of a swept key (aggregator x attack x
malicious fraction tables)."""

import pytest

from lightfed.experiments import compare, markdown

ATTACK, FRACTION = "trainer.attack", "trainer.attack.init_args.fraction"


def _row(config: str, setting: str, final: float | None, std: float | None = None, finished: int = 1) -> dict:
    return {"config": config, "setting": setting, "final_mean": final, "final_std": std, "finished": finished}


def test_the_pivot_puts_each_value_of_the_key_in_its_own_column_by_hand():
    settings = {}
    rows = []
    for config, accuracies in (("fedavg", (0.9, 0.5)), ("krum", (0.8, 0.75))):
        for fraction, accuracy in zip(("0", "0.3"), accuracies, strict=True):
            setting = {ATTACK: "SignFlipping", FRACTION: fraction}
            label = f"trainer.attack=SignFlipping trainer.attack.fraction={fraction}"
            settings[config, label] = setting
            rows.append(_row(config, label, accuracy, 0.01, finished=2 if config == "krum" else 1))
    rows[-1]["final_mean"] = None  # krum at 0.3 has no finished run
    table = markdown.render_pivot(rows, settings, FRACTION, "val_acc").splitlines()
    assert table[0] == "| config | setting | trainer.attack.fraction=0 | trainer.attack.fraction=0.3 |"
    assert table[2] == "| fedavg | trainer.attack=SignFlipping | 0.9000 | 0.5000 |"
    assert table[3] == "| krum | trainer.attack=SignFlipping | 0.800 ± 0.010 | — |"
    assert table[-1] == "final val_acc by trainer.attack.fraction: mean ± std over the finished runs."


def test_the_pivot_key_must_be_swept(tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text("trainer: {rounds: 1}\n")
    with pytest.raises(SystemExit) as exit:
        compare.main(["--configs", str(config), "--grid", f"{ATTACK}=A,B", "--pivot", FRACTION, "--list"])
    assert exit.value.code == 2
    assert f"--pivot {FRACTION}: not a --grid key ({ATTACK})" in capsys.readouterr().err
