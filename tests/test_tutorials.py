"""The tutorials run as written, on tiny settings: each command of a tutorial's bash blocks runs (with fewer rounds
and seeds), the files it tells the reader to write are its own code blocks, and each output it shows has the shape
of what the command prints now (numbers and paths aside), so a changed output makes the page fail here."""

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from lightfed.cli import main, run

ROOT = Path(__file__).resolve().parents[1]
TUTORIALS = ROOT / "docs" / "tutorials"


def commands(page: str) -> list[list[str]]:
    """The commands of the page's bash blocks, one list of arguments each (comments dropped)."""
    blocks = re.findall(r"```bash\n(.*?)```", page, re.S)
    return [shlex.split(line, comments=True) for block in blocks for line in block.splitlines() if line.strip()]


def shown(page: str, name: str) -> list[str]:
    """The lines of the output block marked ``<!-- output: name -->``."""
    return re.search(rf"<!-- output: {name} -->\n```text\n(.*?)```", page, re.S).group(1).splitlines()


def files(page: str) -> dict[str, str]:
    """The files the page has the reader write: each code block marked ``<!-- file: path -->``."""
    return dict(re.findall(r"<!-- file: (\S+) -->\n```\w*\n(.*?)```", page, re.S))


def shape(line: str) -> str:
    """A line with its numbers, its absolute paths and its 'not reached' marks made alike."""
    line = re.sub(r"(?<![\w.])/\S*?(?=runs/)", "/", line)  # where the reader's folder is
    line = re.sub(r"\d+(\.\d+)? \(\d+/\d+\)|—", "#", line)  # rounds to the target, reached or not
    return re.sub(r"-?\d+(\.\d+)?(e[-+]?\d+)?", "#", line)


def test_shapes_ignore_numbers_and_folders_only():
    assert shape("[2/12] fedavg seed=1: val_acc=0.6927 (5.3 s), logs in /home/me/x/runs/compare") == shape(
        "[1/4] fedavg seed=0: val_acc=1 (0.2 s), logs in /tmp/pytest-1/y/runs/compare"
    )
    assert shape("| 17 (1/3) | 0.66 ± 0.04 |") == shape("| — | 0.5 ± 0 |")
    assert shape("val_acc=0.9") != shape("val_loss=0.9") and shape("a; b") != shape("a, b")


@pytest.fixture
def lightfed_folder(tmp_path, monkeypatch):
    """A working folder as the reader's: the repository's configs, and nothing else."""
    (tmp_path / "configs").symlink_to(ROOT / "configs")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _tiny_fit(argv: list[str], rounds: int = 2) -> list[str]:
    assert argv[:2] == ["lightfed", "fit"]
    return [*argv[1:], "--trainer.rounds", str(rounds), "--trainer.progress_bar", "false"]


def test_a_first_run_shows_what_the_run_prints_writes_and_logs(lightfed_folder, capsys):
    page = (TUTORIALS / "first-run.md").read_text()
    first, resume, tensorboard, skewed, wrong = commands(page)
    capsys.readouterr()
    run(_tiny_fit(first))
    printed = capsys.readouterr().out.splitlines()
    assert [shape(line) for line in printed[-3:]] == [shape(line) for line in shown(page, "first-run")]

    folder = lightfed_folder / "runs" / "quickstart" / "version_0"
    listed = re.findall(r"^\| `([^`]+)` \|", page[page.index("## 3.") : page.index("## 4.")], re.M)
    assert listed == ["config.yaml", "metrics.jsonl", "events.out.tfevents.*", "checkpoints/last.ckpt"]
    assert all(list(folder.glob(name)) for name in listed)

    assert tensorboard == ["tensorboard", "--logdir", "runs"]
    table = page[page.index("## 4.") : page.index("## 5.")]
    named = {name for row in re.findall(r"^\| (.+?) \|", table, re.M) for name in re.findall(r"`([~\w/]+)`", row)}
    curves = {name for name in named if not name.startswith("_") and ("/" in name or name.endswith(("acc", "loss")))}
    assert {
        "curves/val_acc",
        "curves/train_loss",
        "~round/time_s",
        "~clients/val_acc_mean",
        "~final/test_acc",
    } <= curves
    assert sorted(curves - set(EventAccumulator(str(folder)).Reload().Tags()["scalars"])) == []

    assert resume[:4] == ["lightfed", "fit", "--config", "runs/quickstart/version_0/config.yaml"]
    assert resume[-2:] == ["--ckpt_path", "last"]
    run([*resume[1 : resume.index("--trainer.rounds")], "--trainer.rounds", "3", "--ckpt_path", "last"])
    assert json.loads((folder / "metrics.jsonl").read_text().splitlines()[-1])["round"] == 3
    assert "data.partitioner.init_args.alpha" in " ".join(skewed)
    run(_tiny_fit(skewed, rounds=1))

    with pytest.raises(SystemExit) as exit:
        main(wrong[1:])
    assert exit.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == shown(page, "wrong-option")[0]


def _compare(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exit:
        main(argv)
    assert exit.value.code == 0


def _configs(command: list[str]) -> list[str]:
    """The files a compare command's ``--configs`` names."""
    after = command[command.index("--configs") + 1 :]
    return after[: next((i for i, arg in enumerate(after) if arg.startswith("--")), len(after))]


def test_compare_strategies_on_your_own_data_makes_the_table_and_plot_shown(lightfed_folder, capfd):
    (lightfed_folder / "configs").unlink()  # the page's own files, in a folder of the reader's
    page = (TUTORIALS / "compare.md").read_text()
    for path, text in files(page).items():
        (lightfed_folder / path).parent.mkdir(parents=True, exist_ok=True)
        (lightfed_folder / path).write_text(text)
    strategies = ["fedavg", "fedprox", "scaffold", "fedecado"]
    overlays = [f"mine/{name}.yaml" for name in strategies]
    assert sorted(files(page)) == sorted(
        ["mine/base.yaml", "mine/mydata.py", "mine/mymodel.py", "mine/mymodel.yaml", *overlays]
    )
    for name in strategies:  # the repository's overlays, as the page says
        shipped = yaml.safe_load((ROOT / "configs" / "strategies" / f"{name}.yaml").read_text())["strategy"]
        assert yaml.safe_load((lightfed_folder / "mine" / f"{name}.yaml").read_text()) == {"strategy": shipped}
    compare, own_model, *sweeps = commands(page)
    assert _configs(compare) == _configs(own_model) == overlays

    capfd.readouterr()
    _compare([*compare[1:], "--rounds", "2", "--seeds", "0", "1", "--workers", "2"])  # two seeds: mean ± std
    printed = capfd.readouterr().out.splitlines()  # the runs' lines come from the processes they run in
    progress = [line for line in printed if line.startswith(("compare: ", "["))]
    assert {shape(line) for line in progress} == {shape(line) for line in shown(page, "compare-progress")}
    out = lightfed_folder / "runs" / "compare"
    table = [line for line in (out / "table.md").read_text().splitlines() if line.startswith("|")]
    assert [shape(line) for line in table] == [shape(line) for line in shown(page, "compare-table")]
    assert all((out / name).is_file() for name in ("accuracy.png", "table.tex", "table.csv", "results.json"))
    assert (ROOT / "docs" / "images" / "compare-accuracy.png").is_file()

    bases = own_model[own_model.index("--base") + 1 : own_model.index("--configs")]
    assert bases == ["mine/base.yaml", "mine/mymodel.yaml"]
    _compare([*own_model[1:], "--rounds", "1", "--seeds", "0", "--workers", "2"])
    folder = lightfed_folder / own_model[own_model.index("--out") + 1]
    assert "mymodel.Classifier" in next((folder / "runs").glob("scaffold*/version_0/config.yaml")).read_text()
    assert len([line for line in (folder / "table.md").read_text().splitlines() if line.startswith("| ")]) == 5

    for sweep in sweeps:  # the tuning and heterogeneity sweeps, one round each
        assert sweep[:2] == ["lightfed", "compare"] and "--grid" in sweep
        _compare([*sweep[1:], "--rounds", "1", "--workers", "2"])
        folder = lightfed_folder / sweep[sweep.index("--out") + 1]
        rows = [line for line in (folder / "table.md").read_text().splitlines() if line.startswith("| ")][1:]
        values = sweep[sweep.index("--grid") + 1].split("=")[1].split(",")
        assert len(rows) == len(values) * len(_configs(sweep))
    own_lr = re.search(r"`--grid (model\.init_args\.lr=[\d.,]+)`", page).group(1)  # your own model's learning rate
    own_sweep = ["compare", "--base", *bases, "--configs", overlays[0], "--grid", own_lr, "--out", "runs/own-lr"]
    _compare([*own_sweep, "--rounds", "1"])
    rows = (lightfed_folder / "runs" / "own-lr" / "table.md").read_text().splitlines()
    assert len([line for line in rows if line.startswith("| ")]) == 1 + len(own_lr.split(","))


def test_training_with_a_privacy_budget_prints_the_lines_shown(lightfed_folder, capsys):
    page = (TUTORIALS / "privacy-budget.md").read_text()
    for path, text in files(page).items():
        (lightfed_folder / path).parent.mkdir(parents=True, exist_ok=True)
        (lightfed_folder / path).write_text(text)
    example_level, user_level = commands(page)
    assert "configs/privacy/dp-sgd-budget.yaml" in example_level and "mine/user-level-budget.yaml" in user_level
    capsys.readouterr()
    run([*_tiny_fit(example_level, rounds=1), "--trainer.clients_per_round", "2"])  # each client's noise is solved for
    printed = capsys.readouterr().out.splitlines()
    assert [shape(line) for line in printed[-3:]] == [shape(line) for line in shown(page, "dp-sgd")]
    spent = float(re.search(r"privacy/epsilon_max=([\d.]+)", printed[-2]).group(1))
    assert 7.99 <= spent <= 8  # the budget spent, in whatever number of rounds

    run([*user_level[1:], "--trainer.progress_bar", "false"])  # the budget stops it after a few rounds
    printed = capsys.readouterr().out.splitlines()
    assert [shape(line) for line in printed[-4:]] == [shape(line) for line in shown(page, "user-level")]


def test_a_strategy_with_a_client_rule_is_written_checked_and_run_as_shown(lightfed_folder, capsys, monkeypatch):
    page = (TUTORIALS / "write-a-strategy.md").read_text()
    for path, text in files(page).items():
        (lightfed_folder / path).write_text(text)
    monkeypatch.syspath_prepend(str(lightfed_folder))
    check = re.search(r"## 3\..*?```python\n(.*?)```", page, re.S).group(1)
    exec(compile(check, "write-a-strategy.md", "exec"), {})  # its asserts hold
    (command,) = commands(page)
    capsys.readouterr()
    run(_tiny_fit(command))
    printed = capsys.readouterr().out.splitlines()
    assert [shape(line) for line in printed[-3:]] == [shape(line) for line in shown(page, "clipped")]


def test_one_and_two_processes_end_with_the_numbers_shown(lightfed_folder, capsys):
    page = (TUTORIALS / "scale-up.md").read_text()
    one, two, gpu, gpus, *slurm, listed, submit = commands(page)
    assert two == [*one[:-2], "--trainer.name", "two", "--trainer.devices", "2"]
    capsys.readouterr()
    run(_tiny_fit(one, rounds=1))
    firsts = [capsys.readouterr().out.splitlines()[-3]]
    done = subprocess.run(  # two processes: a command of its own
        [sys.executable, "-m", "lightfed", *_tiny_fit(two, rounds=1)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stderr
    firsts.append(done.stdout.splitlines()[-3])
    assert firsts[0] == firsts[1]  # the same model on one process and on two
    assert [shape(firsts[0])] == [shape(line) for line in shown(page, "one-and-two")]

    assert all("--trainer.accelerator" in command and "gpu" in command for command in (gpu, gpus))
    assert all((ROOT / arg).is_file() for command in [*slurm, submit] for arg in command if arg.startswith("SLURM/"))
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit:
        main(listed[1:])
    assert exit.value.code == 0
    planned = capsys.readouterr().out.splitlines()
    assert len(planned) == 6 and all(line.startswith("lightfed fit --config ") for line in planned)
