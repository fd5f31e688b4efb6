"""lightfed compare: spec parsing, sweeps, metrics files, summaries and tables by hand; then small end-to-end
comparisons, one of them with two worker processes."""

import csv
import json
import math
import os
import random
import re
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from lightfed.cli import main as lightfed_main
from lightfed.experiments import compare, markdown, plan, run_logs, summaries, sweep_specs
from tests.conftest import trainer_options
from tests.test_cli import _readme_own_model_and_data

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = str(ROOT / "configs" / "quickstart.yaml")

# runs one after the other in the test's process, with conftest's one thread
FAST = [
    "--rounds",
    "2",
    "--set",
    "data.partitioner.init_args.num_clients=10",
    "--set",
    "trainer.clients_per_round=5",
    "--set",
    "trainer.client_eval_interval=0",
    "--workers",
    "1",
]
LR = "strategy.init_args.server_lr"


# ----------------------------------------------------------------- sweeps


def test_grid_is_the_cartesian_product_first_key_slowest():
    grid = [sweep_specs.parse_grid("a.b=1,2"), sweep_specs.parse_grid("c=x, y ,z")]
    assert grid == [("a.b", ["1", "2"]), ("c", ["x", "y", "z"])]
    settings = sweep_specs.expand_grid(grid)
    assert len(settings) == 6
    assert settings == [{"a.b": a, "c": c} for a in ["1", "2"] for c in ["x", "y", "z"]]
    assert sweep_specs.expand_grid([]) == [{}]


def test_random_sampling_is_deterministic_for_a_sweep_seed_and_within_bounds():
    specs = [
        sweep_specs.parse_random("model.init_args.lr=loguniform:1e-4:1e-1"),
        sweep_specs.parse_random("m=uniform:0.2:0.8"),
        sweep_specs.parse_random("opt=choice:sgd,adam"),
    ]
    first = sweep_specs.sample_random(specs, 50, sweep_seed=3)
    assert first == sweep_specs.sample_random(specs, 50, sweep_seed=3)
    assert first != sweep_specs.sample_random(specs, 50, sweep_seed=4)
    lrs = [float(s["model.init_args.lr"]) for s in first]
    assert all(1e-4 <= lr <= 1e-1 for lr in lrs)
    assert min(lrs) < 1e-3 and max(lrs) > 1e-2  # spread over the decades, not uniform on [1e-4, 0.1]
    assert all(0.2 <= float(s["m"]) <= 0.8 for s in first)
    assert {s["opt"] for s in first} == {"sgd", "adam"}
    # values go to the command line as they will be used: at most 4 significant digits
    assert all(len(s["m"].replace("0.", "", 1)) <= 4 for s in first)


def test_random_draws_are_those_of_python_random_by_hand():
    """The draws of a sweep seed do not change: existing sweeps reproduce."""
    specs = [
        sweep_specs.parse_random("lr=loguniform:1e-4:1e-1"),
        sweep_specs.parse_random("m=uniform:0.2:0.8"),
        sweep_specs.parse_random("opt=choice:sgd, adam ,rmsprop"),
        sweep_specs.parse_random("epochs=randint:1:5"),
    ]
    rng = random.Random(7)
    expected = []
    for _ in range(20):
        lr = math.exp(rng.uniform(math.log(1e-4), math.log(1e-1)))
        m = rng.uniform(0.2, 0.8)
        expected.append(
            {
                "lr": repr(min(max(float(f"{lr:.4g}"), 1e-4), 1e-1)),
                "m": repr(float(f"{m:.4g}")),
                "opt": rng.choice(["sgd", "adam", "rmsprop"]),
                "epochs": str(rng.randint(1, 5)),
            }
        )
    assert sweep_specs.sample_random(specs, 20, sweep_seed=7) == expected
    assert {s["epochs"] for s in expected} == {"1", "2", "3", "4", "5"}
    # rounded to 4 digits (0.1235) and kept within the bounds
    assert (
        sweep_specs.sample_random([sweep_specs.parse_random("x=uniform:0.12345:0.12346")], 5, 0)
        == [{"x": "0.12346"}] * 5
    )


def test_settings_combine_grid_and_samples_and_drop_duplicates():
    grid = [sweep_specs.parse_grid("a=1,2,3")]
    randoms = [sweep_specs.parse_random("b=uniform:0:1")]
    settings = sweep_specs.plan_settings(grid, randoms, samples=2, sweep_seed=0)
    assert len(settings) == 6 and [s["a"] for s in settings] == ["1", "1", "2", "2", "3", "3"]
    assert [s["b"] for s in settings[:2]] == [s["b"] for s in settings[2:4]]  # the same samples at each grid point
    # a choice over two values drawn 20 times gives at most two distinct settings
    assert len(sweep_specs.plan_settings([], [sweep_specs.parse_random("c=choice:p,q")], samples=20)) == 2


def test_run_names_and_arguments_are_deterministic():
    settings = sweep_specs.expand_grid([sweep_specs.parse_grid(f"{LR}=1.0,0.5")])
    runs = plan.plan_runs(["/c/quickstart.yaml"], [0, 1], settings, {"trainer.local_epochs": "1"}, 3, "/out/runs")
    assert [r.name for r in runs] == [
        "quickstart__strategy.server_lr=1.0__seed0",
        "quickstart__strategy.server_lr=1.0__seed1",
        "quickstart__strategy.server_lr=0.5__seed0",
        "quickstart__strategy.server_lr=0.5__seed1",
    ]
    assert runs[3].argv == [
        "fit",
        "--config",
        "/c/quickstart.yaml",
        *trainer_options(progress_bar="false", local_epochs=1),
        f"--{LR}",
        "0.5",
        *trainer_options(rounds=3),
        "--seed_everything",
        "1",
        *trainer_options(root_dir="/out/runs", name="quickstart__strategy.server_lr=0.5__seed1"),
    ]
    assert plan.run_name("fedavg", {}, 2) == "fedavg__seed2"
    assert plan.config_names(["c/digits/fedavg.yaml", "c/cifar10/fedavg.yaml", "c/digits/fedprox.yaml"]) == [
        "digits-fedavg",
        "cifar10-fedavg",
        "fedprox",
    ]
    with pytest.raises(sweep_specs.SpecError, match="two configs are named 'c-fedavg'"):
        plan.plan_runs(["c/fedavg.yaml", "c/fedavg.yaml"], [0], [{}], {}, None, "/out/runs")
    assert plan.setting_label({}) == "defaults"
    long = plan.run_name("x", {f"k{i}": "v" * 20 for i in range(10)}, 0)
    assert len(long) < 120 and long == plan.run_name("x", {f"k{i}": "v" * 20 for i in range(10)}, 0)


# ----------------------------------------------------------------- metrics files


def _write_metrics(folder: Path, *lines: dict) -> None:
    folder.mkdir(parents=True)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))


def test_read_log_takes_the_last_line_of_a_round_from_the_newest_version(tmp_path):
    _write_metrics(tmp_path / "run" / "version_9", {"round": 1, "val_acc": 0.9, "round/time_s": 100.0})
    # a run stopped after round 2, resumed from its round-1 checkpoint: rounds 2 and 3 logged again
    _write_metrics(
        tmp_path / "run" / "version_10",
        {"round": 1, "val_acc": 0.5, "val_loss": 1.5, "round/time_s": 2.0},
        {"round": 2, "val_acc": 0.6, "round/time_s": 3.0, "strategy/lr": 0.1, "communication/sent_bytes": 100.0},
        {"round": 3, "val_acc": 0.4, "round/time_s": 4.0},
        {"round": 2, "val_acc": 0.7, "round/time_s": 5.0, "communication/sent_bytes": 20.0},
        {"round": 3, "val_acc": 0.8, "round/time_s": 6.0, "communication/sent_bytes": 30.0},
        {"round": 4, "val_loss": 0.9, "round/time_s": 7.0},
    )  # val_acc not evaluated in round 4
    (tmp_path / "run" / "version_11").mkdir()  # a run that has not written a line yet
    log = run_logs.read_log(tmp_path, "run", "val_acc")
    assert log == {
        "log_dir": str(tmp_path / "run" / "version_10"),
        "history": [[1, 0.5], [2, 0.7], [3, 0.8]],
        "wall_time_s": 2.0 + 5.0 + 6.0 + 7.0,
        "sent_bytes": 20.0 + 30.0,  # the last line of each round
        "metrics": ["communication/sent_bytes", "round/time_s", "val_acc", "val_loss"],
        "final_record": None,
        "last_round": 4,
    }
    assert run_logs.read_log(tmp_path, "run", "val_loss")["history"] == [[1, 1.5], [4, 0.9]]
    assert run_logs.read_log(tmp_path, "run", "nope")["history"] == []
    assert run_logs.read_log(tmp_path, "other", "val_acc") is None


# ----------------------------------------------------------------- numbers and table


def test_summaries_by_hand():
    h1 = [[1, 0.5], [2, 0.8], [3, 0.7]]
    h2 = [[1, 0.6], [2, 0.7], [3, 0.9]]
    h3 = [[1, 0.1], [2, 0.2], [3, 0.3]]
    assert summaries.summarise_history(h1, 0.75) == {"final": 0.7, "best": 0.8, "rounds_to_target": 2}
    assert summaries.summarise_history(h2, 0.75) == {"final": 0.9, "best": 0.9, "rounds_to_target": 3}
    assert summaries.summarise_history(h3, 0.75)["rounds_to_target"] is None
    assert summaries.summarise_history(h3, None)["rounds_to_target"] is None
    # a loss: lower is better
    assert summaries.summarise_history([[1, 2.0], [2, 0.4], [3, 0.6]], 0.5, "min") == {
        "final": 0.6,
        "best": 0.4,
        "rounds_to_target": 2,
    }

    runs = [{**summaries.summarise_history(h, 0.75), "wall_time_s": t} for h, t in [(h1, 10.0), (h2, 20.0), (h3, 30.0)]]
    row = summaries.summarise_group(runs[:2], planned=2)
    assert row["final_mean"] == pytest.approx(0.8) and row["final_std"] == pytest.approx(statistics.stdev([0.7, 0.9]))
    assert row["best_mean"] == pytest.approx(0.85) and row["rounds_to_target_mean"] == 2.5 and row["reached"] == 2
    assert row["wall_time_s_mean"] == 15.0
    assert markdown.format_rounds(row) == "2.5 (2/2)"
    assert markdown.format_rounds(summaries.summarise_group([runs[0], runs[2]], 3)) == "2 (1/2)"
    assert markdown.format_rounds(summaries.summarise_group(runs[2:], 1)) == "—"
    empty = summaries.summarise_group([], planned=2)
    assert empty["finished"] == 0 and empty["final_mean"] is None


def test_table_rendering():
    h1, h2 = [[1, 0.5], [2, 0.8], [3, 0.7]], [[1, 0.6], [2, 0.7], [3, 0.9]]
    runs = [
        {**summaries.summarise_history(h, 0.75), "wall_time_s": t, "test_at_best": b}
        for h, t, b in [(h1, 10.0, 0.6), (h2, 20.0, 0.7)]
    ]
    rows = [
        {"config": "fedavg", "setting": "strategy.server_lr=0.5", **summaries.summarise_group(runs, 2)},
        {"config": "fedprox", "setting": "defaults", **summaries.summarise_group(runs[:1], 2)},
        {"config": "fedyogi", "setting": "defaults", **summaries.summarise_group([], 2)},
    ]
    table = markdown.render_table(rows, "val_acc", 0.75)
    lines = table.splitlines()
    assert lines[0] == (
        "| config | setting | runs | final val_acc | best val_acc | test_acc at best val_acc | "
        "rounds to val_acc ≥ 0.75 | time/run (s) | sent/run (MB) |"
    )
    assert (
        lines[2]
        == "| fedavg | strategy.server_lr=0.5 | 2/2 | 0.80 ± 0.14 | 0.850 ± 0.071 | 0.650 ± 0.071 | 2.5 (2/2) | 15.0 | — |"
    )
    assert lines[3] == "| fedprox | defaults | 1/2 | 0.7000 | 0.8000 | 0.6000 | 2 (1/1) | 10.0 | — |"
    assert lines[4] == "| fedyogi | defaults | 0/2 | — | — | — | — | — | — |"
    assert "rounds to" not in markdown.render_table(rows, "val_acc", None)
    assert " at best " not in markdown.render_table(
        rows, "train_loss", None, "min"
    )  # no validation metric, no test column


# ----------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "parse, spec, message",
    [
        ("parse_set", "model.init_args.lr", "expected KEY=VALUE"),
        ("parse_set", "=0.1", "expected KEY=VALUE"),
        ("parse_set", "a b=0.1", "expected KEY=VALUE"),
        ("parse_set", "lr=", "expected KEY=VALUE"),
        ("parse_set", "trainer.name=x", "set by lightfed compare"),
        ("parse_grid", "lr=0.1,,0.2", "empty value"),
        ("parse_grid", "lr=0.1,0.1", "listed twice"),
        ("parse_random", "lr=normal:0:1", "unknown distribution 'normal'; use loguniform:MIN:MAX"),
        ("parse_random", "lr=uniform:0", "expected uniform:MIN:MAX"),
        ("parse_random", "lr=uniform:a:1", "must be numbers"),
        ("parse_random", "lr=uniform:0:inf", "must be finite"),
        ("parse_random", "lr=uniform:2:1", "the lower bound of 'uniform:2:1' is above the upper bound"),
        ("parse_random", "lr=loguniform:1e-1:1e-4", "the lower bound of 'loguniform:1e-1:1e-4' is above"),
        ("parse_random", "lr=randint:1:2.5", "randint bounds must be integers"),
        ("parse_random", "lr=0.5", "unknown distribution '0.5'"),  # a fixed value is a --set
        ("parse_random", "lr=loguniform:0:1", "loguniform bounds must be > 0"),
        ("parse_random", "lr=loguniform:-1:1", "loguniform bounds must be > 0"),
        ("parse_random", "opt=choice:a,,b", "no empty choice"),
    ],
)
def test_bad_specs_raise_one_line_messages(parse, spec, message):
    with pytest.raises(sweep_specs.SpecError) as error:
        getattr(sweep_specs, parse)(spec)
    assert message in str(error.value) and "\n" not in str(error.value)


def _cli_error(argv, capsys) -> str:
    with pytest.raises(SystemExit) as exit:
        compare.main(argv)
    assert exit.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--random", "lr=gamma:1:2", "--samples", "2"], "unknown distribution 'gamma'"),
        (["--random", "lr=uniform:1:2"], "--random needs --samples K"),
        (["--samples", "3"], "--samples needs --random"),
        (["--grid", "a=1,2", "--set", "a=3"], "a is both fixed (--set) and swept"),
        (["--grid", "a=1,2", "--random", "a=uniform:0:1", "--samples", "2"], "a is swept twice"),
        (["--set", "seed_everything=1"], "use --seeds"),
        (["--seeds", "0", "0"], "a seed is given twice"),
        (["--rounds", "2", "--set", "trainer.rounds=3"], "trainer.rounds is given both"),
    ],
)
def test_cli_reports_bad_input_in_one_line(extra, message, capsys, tmp_path):
    line = _cli_error(["--configs", QUICKSTART, "--out", str(tmp_path), *extra], capsys)
    assert line.startswith("lightfed compare: error:") and message in line


def test_cli_reports_missing_configs_and_unknown_lightfed_options(capsys, tmp_path):
    line = _cli_error(["--configs", QUICKSTART, str(tmp_path / "nope.yaml")], capsys)
    assert line == f"lightfed compare: error: config file not found: {tmp_path / 'nope.yaml'}"
    # lightfed's own parser checks every planned run before anything is trained
    line = _cli_error(["--configs", QUICKSTART, "--out", str(tmp_path), "--set", "trainer.roundz=3"], capsys)
    assert line.startswith("lightfed compare: error: run quickstart__seed0:") and "trainer.roundz" in line
    line = _cli_error(["--configs", QUICKSTART, "--out", str(tmp_path), "--set", "model.init_args.lr=0.1"], capsys)
    assert line.endswith(  # the one line lightfed fit prints, not the parser's message
        "model.lr: lightfed.models.SmallCNN has no option 'lr'; it takes num_classes, in_channels, width, optimizer"
        " (lightfed fit --model.help lightfed.models.SmallCNN describes them)"
    )
    line = _cli_error(["--configs", QUICKSTART, "--out", str(tmp_path), "--task-index", "1"], capsys)
    assert "out of range: the plan has 1 runs" in line


def test_ctrl_c_ends_the_sweep_in_one_line_that_says_how_to_go_on(capsys, tmp_path, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(compare, "execute_all", interrupted)
    assert compare.main(["--configs", QUICKSTART, "--out", str(tmp_path)]) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        len(err) == 1 and err[0].startswith("compare: stopped by Ctrl-C; rerun the command") and "--collect" in err[0]
    )


# ----------------------------------------------------------------- end to end


def _table_rows(out: Path) -> list[str]:
    return [line for line in (out / "table.md").read_text().splitlines() if line.startswith("| quickstart")]


def _without_time(out: Path) -> list[str]:
    """The table's rows without the wall time, which differs between two runs of one plan (the bytes sent do not)."""
    return [" | ".join(row.rsplit(" | ", 2)[::2]) for row in _table_rows(out)]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """3 server learning rates x 2 seeds, 2 rounds each, run directly (one thread, as conftest's tests run)."""
    out = tmp_path_factory.mktemp("sweep")
    argv = [
        "--configs",
        QUICKSTART,
        "--seeds",
        "0",
        "1",
        "--target",
        "0.3",
        "--out",
        str(out),
        "--grid",
        f"{LR}=1.0,0.5,0.25",
        *FAST,
    ]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # conftest's one-thread fixture is per test, this fixture is per module
    try:
        assert compare.main(argv) == 0
    finally:
        torch.set_num_threads(threads)
    return argv, out


def test_list_prints_one_command_per_run(sweep, capsys, tmp_path):
    argv, out = sweep
    assert compare.main([*argv, "--list"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 6 and all(line.startswith(f"lightfed fit --config {QUICKSTART} ") for line in lines)
    assert lines[3].endswith(
        f"--{LR} 0.5 --trainer.rounds 2 --seed_everything 1 --trainer.root_dir {out / 'runs'} "
        "--trainer.name quickstart__strategy.server_lr=0.5__seed1"
    )


def test_sweep_writes_table_plot_and_results(sweep):
    _, out = sweep
    rows = _table_rows(out)
    assert len(rows) == 3 and all(row.split(" | ")[2] == "2/2" for row in rows)
    assert [row.split(" | ")[1] for row in rows] == [f"strategy.server_lr={v}" for v in ("1.0", "0.5", "0.25")]
    assert (out / "accuracy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    results = json.loads((out / "results.json").read_text())
    runs = results["runs"]
    assert len(runs) == 6 and {r["status"] for r in runs} == {"finished"}
    assert {(r["setting"][LR], r["seed"]) for r in runs} == {(v, s) for v in ("1.0", "0.5", "0.25") for s in (0, 1)}
    for run in runs:
        assert [step for step, _ in run["history"]] == [1, 2]
        assert run["final"] == run["history"][-1][1] and run["best"] == max(v for _, v in run["history"])
        assert (Path(run["log_dir"]) / "config.yaml").is_file() and run["wall_time_s"] > 0
        final = json.loads((Path(run["log_dir"]) / "metrics.jsonl").read_text().splitlines()[-1])
        assert final["final"] and run["test_at_best"] == final["best_test_acc"]  # the test set, read once at the end
    # the table's numbers are the runs' numbers
    first = [r["final"] for r in runs[:2]]
    assert markdown.mean_std(statistics.fmean(first), statistics.stdev(first), 2) in rows[0]
    assert results["rows"][0]["final_mean"] == pytest.approx(statistics.fmean(first))
    assert all(math.isfinite(row["final_std"]) for row in results["rows"])
    # the same table for papers: LaTeX with its rows, CSV at full precision; the plot also as PDF and SVG
    assert (out / "table.tex").read_text().count(" \\\\\n") == 1 + len(rows)
    with open(out / "table.csv", newline="") as file:
        assert [float(row["final_mean"]) for row in csv.DictReader(file)] == [r["final_mean"] for r in results["rows"]]
    assert (out / "accuracy.pdf").read_bytes()[:4] == b"%PDF" and b"<svg" in (out / "accuracy.svg").read_bytes()
    # the final model's distribution over clients, from each run's final record, and the overrides of every run
    table = (out / "table.md").read_text()
    assert "| clients' val_acc mean | clients' val_acc std | clients' val_acc worst 10 % |" in table
    worst = [json.loads((Path(r["log_dir"]) / "metrics.jsonl").read_text().splitlines()[-1]) for r in runs[:2]]
    assert results["rows"][0]["clients_worst10_mean"] == pytest.approx(
        statistics.fmean(w["clients/val_acc_worst10"] for w in worst)
    )
    fixed = (
        "data.partitioner.num_clients=10 trainer.clients_per_round=5 trainer.client_eval_interval=0 trainer.rounds=2"
    )
    assert table.endswith(f"\nevery run: {fixed}\n") and results["fixed"] == fixed


def test_collect_reproduces_the_table_from_the_logs(sweep):
    argv, out = sweep
    table = (out / "table.md").read_text()
    (out / "table.md").unlink()
    assert compare.main([*argv, "--collect"]) == 0
    assert (out / "table.md").read_text() == table


def test_collect_names_a_metric_the_runs_did_not_log(sweep, capsys):
    argv, _ = sweep
    line = _cli_error([*argv, "--collect", "--metric", "val_accuracy"], capsys)
    assert (
        line.startswith("lightfed compare: error: --metric val_accuracy is not in the logs of quickstart__")
        and "val_acc," in line
    )


def test_a_diverging_run_is_reported_and_left_out_of_the_numbers(tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["--configs", QUICKSTART, "--out", str(out), *FAST, "--set", f"{LR}=1e30", "--usable", "0.8"]
    assert compare.main(argv) == 1
    captured = capsys.readouterr()
    assert "seed=0: failed: the global weights became NaN/Inf" in captured.out
    assert "no finished logs" not in captured.err  # diverged is an outcome, not a run still to do
    assert (
        _table_rows(out)[0] == "| quickstart | 0/1 | — | — | — | — | — |"
    )  # no --target, no sweep: no rounds or setting column
    assert _table_rows(out)[1] == "| quickstart | 0/1 | 1 | 0% |"  # --usable: diverged counts, as not usable
    (run,) = json.loads((out / "results.json").read_text())["runs"]
    assert run["status"] == "diverged" and len(run["history"]) < 2 and "final" not in run
    (out / "runs" / run["name"] / "diverged.txt").unlink()  # without the marker: an interrupted run, still to do
    assert compare.main([*argv, "--collect"]) == 0
    assert "1 of 1 runs have no finished logs" in capsys.readouterr().err


def test_task_index_then_collect_gives_the_table_of_a_direct_run(tmp_path, capsys):
    base = ["--configs", QUICKSTART, "--seeds", "0", "--target", "0.3", "--grid", f"{LR}=1.0,0.5", *FAST]
    assert compare.main([*base, "--out", str(tmp_path / "direct")]) == 0

    tasks = [*base, "--out", str(tmp_path / "tasks")]
    assert compare.main([*tasks, "--collect"]) == 0  # nothing has run yet: empty rows, every run reported missing
    assert [row.split(" | ")[2:4] for row in _table_rows(tmp_path / "tasks")] == [["0/1", "—"], ["0/1", "—"]]
    assert "2 of 2 runs have no finished logs" in capsys.readouterr().err
    for index in (1, 0):
        assert compare.main([*tasks, "--task-index", str(index)]) == 0
    assert [row.split(" | ")[2] for row in _table_rows(tmp_path / "tasks")] == ["0/1", "0/1"]  # tasks leave the table
    assert compare.main([*tasks, "--collect"]) == 0
    assert _without_time(tmp_path / "tasks") == _without_time(tmp_path / "direct")
    assert len(_without_time(tmp_path / "direct")) == 2 and "1/1" in _without_time(tmp_path / "direct")[0]
    direct = json.loads((tmp_path / "direct" / "results.json").read_text())["runs"]
    tasks_runs = json.loads((tmp_path / "tasks" / "results.json").read_text())["runs"]
    assert [r["history"] for r in tasks_runs] == [r["history"] for r in direct]


def test_two_workers_give_the_table_of_one(tmp_path, capfd, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})  # 2 cores: each worker one thread, as conftest's
    base = ["--configs", QUICKSTART, "--seeds", "0", "1", "--target", "0.2", *FAST, "--rounds", "1"]  # the last wins
    assert compare.main([*base, "--out", str(tmp_path / "one")]) == 0
    assert re.search(r"compare: 2 runs in [\d.]+ s wall, [\d.]+ s of run time \([\d.]+x\)", capfd.readouterr().out)
    assert compare.main([*base, "--out", str(tmp_path / "two"), "--workers", "2"]) == 0
    printed = capfd.readouterr().out  # the workers' lines too
    for i in (1, 2):
        assert printed.count(f"[{i}/2] quickstart defaults seed={i - 1}:") == 1  # one line a run, when it ends
        assert f"[{i}/2] quickstart defaults seed={i - 1}: val_acc=" in printed
    assert "test set, final global model" not in printed  # the runs' own lines stay in their logs
    assert re.search(r"compare: 2 runs in [\d.]+ s wall, [\d.]+ s of run time \([\d.]+x\)", printed)
    assert _without_time(tmp_path / "two") == _without_time(tmp_path / "one")
    assert len(_without_time(tmp_path / "one")) == 1 and "2/2" in _without_time(tmp_path / "one")[0]
    one, two = (json.loads((tmp_path / out / "results.json").read_text())["runs"] for out in ("one", "two"))
    assert [r["history"] for r in two] == [r["history"] for r in one] and all(len(r["history"]) == 1 for r in one)
    assert [r["status"] for r in two] == ["finished", "finished"]


@pytest.mark.slow
def test_lightfed_compare_and_python_m_run_the_tool(tmp_path, capsys):
    argv = ["--configs", QUICKSTART, "--seeds", "0", "1", "--out", str(tmp_path), "--list"]
    with pytest.raises(SystemExit) as exit:
        lightfed_main(["compare", *argv])
    assert exit.value.code == 0
    listed = capsys.readouterr().out.splitlines()
    assert len(listed) == 2 and listed[1].endswith("--trainer.name quickstart__seed1")
    done = subprocess.run(
        [sys.executable, "-m", "lightfed.experiments.compare", *argv], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0 and done.stdout.splitlines() == listed
    lightfed_main(["--help"])
    assert "compare " in capsys.readouterr().out.splitlines()[-1]


def test_a_base_config_comes_before_each_configs_own_file(tmp_path, capsys):
    runs = plan.plan_runs(["/c/fedavg.yaml"], [0], [{}], {}, None, "/out/runs", base=["/c/base.yaml", "/c/more.yaml"])
    assert runs[0].argv[:7] == [
        "fit",
        "--config",
        "/c/base.yaml",
        "--config",
        "/c/more.yaml",
        "--config",
        "/c/fedavg.yaml",
    ]
    digits = ROOT / "configs" / "digits"
    argv = ["--base", str(digits / "base.yaml"), "--configs", str(digits / "fedavg.yaml"), "--out", str(tmp_path)]
    assert compare.main([*argv, "--list"]) == 0
    command = f"lightfed fit --config {digits / 'base.yaml'} --config {digits / 'fedavg.yaml'} --trainer.progress_bar"
    assert capsys.readouterr().out.startswith(command)
    line = _cli_error(["--base", str(tmp_path / "nope.yaml"), *argv[2:]], capsys)
    assert line == f"lightfed compare: error: config file not found: {tmp_path / 'nope.yaml'}"


def test_three_strategies_by_two_seeds_on_digits(tmp_path):
    digits = ROOT / "configs" / "digits"
    configs = [str(digits / f"{name}.yaml") for name in ("fedavg", "fedprox", "scaffold")]
    out = tmp_path / "strategies"
    argv = [
        "--base",
        str(digits / "base.yaml"),
        "--configs",
        *configs,
        "--seeds",
        "0",
        "1",
        "--target",
        "0.2",
        "--out",
        str(out),
        *FAST,
    ]
    assert compare.main(argv) == 0
    rows = [line for line in (out / "table.md").read_text().splitlines() if line.startswith("| ")][1:]
    assert [row.split(" | ")[0].strip("| ") for row in rows] == ["fedavg", "fedprox", "scaffold"]
    assert all(row.split(" | ")[1] == "2/2" for row in rows)  # no setting column: nothing is swept
    assert (out / "accuracy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(json.loads((out / "results.json").read_text())["runs"]) == 6


# ----------------------------------------------------------------- per-config keys and usable rates


def test_scoped_keys_apply_to_their_config_only():
    randoms = [
        sweep_specs.parse_random("a:strategy.lr=choice:0.1,0.2"),
        sweep_specs.parse_random("b:strategy.tol=choice:1,2,3"),
    ]
    settings = sweep_specs.plan_settings([], randoms, samples=6, sweep_seed=0)
    fixed = dict([sweep_specs.parse_set("trainer.rounds=3"), sweep_specs.parse_set("b:strategy.extra=x")])
    runs = plan.plan_runs(["/c/a.yaml", "/c/b.yaml"], [0], settings, fixed, None, "/out/runs")
    by_config = {stem: [r for r in runs if r.stem == stem] for stem in ("a", "b")}
    assert {r.setting["strategy.lr"] for r in by_config["a"]} == {"0.1", "0.2"}  # duplicates dropped per config
    assert len(by_config["a"]) == 2 and all(set(r.setting) == {"strategy.lr"} for r in by_config["a"])
    assert all(set(r.setting) == {"strategy.tol"} for r in by_config["b"])
    assert all("--strategy.extra" in r.argv and "--trainer.rounds" in r.argv for r in by_config["b"])
    assert all("--strategy.extra" not in r.argv for r in by_config["a"])
    assert by_config["b"][0].name.startswith("b__strategy.tol=")
    with pytest.raises(sweep_specs.SpecError, match="'c' is not the name of a config"):
        plan.plan_runs(["/c/a.yaml"], [0], [{}], {"c:x": "1"}, None, "/out/runs")
    with pytest.raises(sweep_specs.SpecError, match="x is given both for every config and for a"):
        plan.plan_runs(["/c/a.yaml"], [0], [{}], {"x": "1", "a:x": "2"}, None, "/out/runs")
    with pytest.raises(sweep_specs.SpecError, match="set by lightfed compare"):
        sweep_specs.parse_set("a:trainer.name=x")


def test_usable_rates_by_hand():
    def run(stem, final, status="finished"):
        return {"stem": stem, "final": final, "status": status}

    results = [
        run("a", 0.9),
        run("a", 0.7),
        run("a", 0.75),
        run("b", 0.1),
        run("b", 0.73),
        run("b", None, "diverged"),
        run("c", 0.0, "unfinished"),
    ]
    best, rates = summaries.usable_rates(results, 0.8)  # threshold 0.72
    assert best == 0.9
    assert rates == {
        "a": {"usable": 2, "finished": 3, "diverged": 0, "share": 2 / 3},
        "b": {"usable": 1, "finished": 2, "diverged": 1, "share": 1 / 3},
        "c": {"usable": 0, "finished": 0, "diverged": 0, "share": None},
    }
    lines = markdown.render_usable(best, rates, "val_acc", 0.8).splitlines()
    assert lines[:5] == [
        "| config | usable runs | diverged | usable share |",
        "|---|---|---|---|",
        "| a | 2/3 | 0 | 67% |",
        "| b | 1/3 | 1 | 33% |",
        "| c | 0/0 | 0 | — |",
    ]
    assert "final val_acc >= 0.8 x the best final val_acc of all finished runs (0.9000)" in lines[-1]


def test_usable_needs_a_metric_where_higher_is_better(capsys, tmp_path):
    line = _cli_error(
        ["--configs", QUICKSTART, "--out", str(tmp_path), "--usable", "0.8", "--metric", "val_loss"], capsys
    )
    assert "--usable F needs 0 < F <= 1" in line


def test_the_readmes_own_model_and_data_are_found_by_compare_as_by_fit(tmp_path, monkeypatch, capsys):
    """``lightfed compare --configs mine.yaml`` beside mine.py, in the folder and from elsewhere."""
    code, config = _readme_own_model_and_data()
    project = tmp_path / "project"
    project.mkdir()
    (project / "mine.py").write_text(code)
    (project / "mine.yaml").write_text(config)
    monkeypatch.chdir(tmp_path)  # the config's folder, not the working folder, holds mine.py
    try:
        argv = ["--configs", "project/mine.yaml", "--rounds", "1", "--workers", "1", "--out", str(tmp_path / "cmp")]
        assert compare.main(argv) == 0
    finally:
        sys.modules.pop("mine", None)
    (run,) = json.loads((tmp_path / "cmp" / "results.json").read_text())["runs"]
    assert run["status"] == "finished" and run["final"] > 0.5  # three blobs 3 apart: chance is 1/3
