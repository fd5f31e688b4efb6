"""scripts/benchmarks/benchmark.py: helpers by hand, then one tiny end-to-end run of both paths (no timing assertions)."""

import json
import subprocess
import sys

import pytest

from lightfed.run.cores import available_cores
from tests.scripts.script_modules import SCRIPTS, load

SCRIPT = SCRIPTS / "benchmarks" / "benchmark.py"
benchmark = load("benchmarks/benchmark.py")

TINY = [
    "--clients",
    "20",
    "--clients-per-round",
    "5",
    "--examples-per-client",
    "50",
    "--rounds",
    "2",
    "--warmup-rounds",
    "1",
    "--repeats",
    "1",
    "--width",
    "8",
    "--threads",
    "1",
    "--test-size",
    "200",
    "--seed",
    "3",
]


def test_a_gpu_leaves_out_lightfeds_worker_threads():
    assert "lightfed-parallel" in benchmark.parse_args([]).paths
    on_a_gpu = benchmark.parse_args(["--device", "cuda"]).paths
    assert on_a_gpu == [path for path in benchmark.DEFAULT_PATHS if path != "lightfed-parallel"]
    with pytest.raises(SystemExit):
        benchmark.parse_args(["--device", "cuda", "--paths", "reference", "lightfed-parallel"])


def test_the_warm_up_rounds_are_not_timed():
    args = benchmark.parse_args(["--rounds", "4", "--warmup-rounds", "1"])
    assert benchmark.total_rounds(args) == 5
    assert benchmark.timed([9.0, 1.0, 2.0, 3.0, 4.0], args) == [1.0, 2.0, 3.0, 4.0]
    assert benchmark.total_rounds(benchmark.parse_args([])) == 7  # 2 warm-up + 5 timed


def test_defaults_follow_the_pfl_cifar10_workload():
    args = benchmark.parse_args([])
    assert (args.clients, args.clients_per_round, args.examples_per_client) == (500, 50, 50)
    assert (args.local_epochs, args.batch_size, args.lr, args.devices) == (1, 10, 0.1, 1)


@pytest.mark.parametrize(
    "argv", [["--clients", "4", "--clients-per-round", "5"], ["--rounds", "0"], ["--warmup-rounds", "-1"]]
)
def test_bad_options_are_refused(argv, capsys):
    with pytest.raises(SystemExit):
        benchmark.parse_args(argv)
    assert "must be" in capsys.readouterr().err


def test_width_120_is_a_model_ten_times_larger():
    models = [benchmark.make_model(benchmark.parse_args(["--width", width])) for width in ("32", "120")]
    assert [sum(p.numel() for p in model.parameters()) for model in models] == [29642, 301210]


def test_the_synthetic_cifar_data_holds_every_clients_examples_and_the_test_set():
    args = benchmark.parse_args(["--clients", "4", "--clients-per-round", "2", "--test-size", "8"])
    splits = benchmark.make_source(args).load(0)
    assert splits.train_x.shape == (200, 3, 32, 32) and splits.test_x.shape == (8, 3, 32, 32)


@pytest.mark.slow
def test_every_path_runs_and_ends_with_the_same_weights(tmp_path):
    """The whole benchmark on a tiny workload: every path's timings and ratios are printed, and all paths trained
    the same clients on the same batches from the same weights, so their final global weights agree."""
    summary = tmp_path / "summary.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *TINY, "--workers", "2", "--json", str(summary), "--paths", *benchmark.PATHS],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert all(f"\n| {path} | " in out for path in benchmark.PATHS) and "| s/round |" in out
    assert "| / concurrent | / reference |" in out and "| max \\|w - reference\\| |" in out
    config = json.loads(summary.read_text())["configs"][0]
    assert (config["width"], config["params"]) == (8, 3962)
    reference = config["reference"]
    for path in benchmark.PATHS:
        assert config[path]["s_per_round"] > 0 and len(config[path]["round_times_runs"][0]) == 2
        assert config[path]["peak_rss_mb_per_process"] > 0 and config[path]["threads"] == 1
        assert config[path]["final_train_loss"] == pytest.approx(reference["final_train_loss"], abs=1e-5)
        assert config[path]["val_acc"] == pytest.approx(reference["val_acc"], abs=1e-9)
    auto = min(available_cores(), 5)  # lightfed's default: a worker per core, at most one per client
    assert [config[path]["workers"] for path in benchmark.PATHS] == [1, 2, auto, 2, 1, 1]
    ratio = config["ratios"]["lightfed/concurrent"]
    assert ratio["ratio"] == pytest.approx(config["lightfed"]["s_per_round"] / config["concurrent"]["s_per_round"])
    assert set(config["max_abs_weight_diff"]) == {f"{path}-reference" for path in benchmark.PATHS[1:]}
    assert max(config["max_abs_weight_diff"].values()) <= 1e-5
