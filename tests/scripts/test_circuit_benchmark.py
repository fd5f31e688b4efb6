"""scripts/benchmarks/circuit_benchmark.py: its settings against the configs, then one tiny digits run of the three strategies
(one process, two timed rounds; no timing assertions beyond finite, positive and consistent numbers)."""

import math
import subprocess
import sys

import harness
import pytest
import yaml

from tests.scripts.script_modules import ROOT, SCRIPTS, load

SCRIPT = SCRIPTS / "benchmarks" / "circuit_benchmark.py"
circuit = load("benchmarks/circuit_benchmark.py")

TINY = [
    "--workloads",
    "digits",
    "--rounds",
    "2",
    "--warmup-rounds",
    "1",
    "--clients",
    "10",
    "--clients-per-round",
    "4",
    "--examples",
    "20",
    "--devices",
    "1",
    "--threads",
    "1",
    "--accelerator",
    "cpu",
    "--strategies",
    "FedAvg",
    "FedECADO",
    "AdaptiveFedECADO",
    "FedECADO-cheap",
    "--variant",
    "FedECADO-cheap=FedECADO,curvature_probes=1,curvature_examples=4",
]


def config(path: str) -> dict:
    return yaml.safe_load((ROOT / "configs" / path).read_text())


def test_digits_follows_its_configs_and_the_inductance_rule_gives_theirs():
    args = circuit.parse_args([])
    run = circuit.settings(args, "digits")
    fedavg = config("digits/base.yaml")
    assert run["clients"] == fedavg["data"]["partitioner"]["init_args"]["num_clients"]
    assert run["clients_per_round"] == fedavg["trainer"]["clients_per_round"]
    assert run["local_epochs"] == fedavg["trainer"]["local_epochs"]
    assert run["batch_size"] == fedavg["data"]["batch_size"]
    assert run["lr"] == fedavg["model"]["init_args"]["optimizer"]["init_args"]["lr"]
    settings = circuit.strategy_settings(args, run)
    assert settings["FedECADO"] == config("digits/fedecado.yaml")["strategy"]["init_args"]  # the defaults
    assert settings["AdaptiveFedECADO"] == config("digits/adaptive_fedecado.yaml")["strategy"]["init_args"]
    assert settings["AdaptiveFedECADO-retro"] == {**settings["AdaptiveFedECADO"], "client_lte": "retrospective"}


def test_cifar_workloads_take_ten_clients_per_round_and_the_configs_tolerances():
    args = circuit.parse_args(["--local-epochs", "2", "--inductance", "0.5"])
    for name in ("vgg11", "resnet18gn"):
        run = circuit.settings(args, name)
        assert run["clients_per_round"] == 10 and run["examples"] == 500 and run["local_epochs"] == 2
        settings = circuit.strategy_settings(args, run)
        assert (
            settings["FedECADO"]["tolerance"] == config("cifar10/fedecado.yaml")["strategy"]["init_args"]["tolerance"]
        )
        assert settings["FedECADO"]["inductance"] == 0.5 and settings["FedECADO"]["sensitivity_step"] == run["lr"]
    run = circuit.settings(circuit.parse_args([]), "vgg11")
    assert circuit.strategy_settings(circuit.parse_args([]), run)["FedECADO"]["inductance"] == pytest.approx(
        10 * 5.5e-4**2
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["--rounds", "0"],
        ["--devices", "0"],
        ["--clients", "4", "--clients-per-round", "5"],
        ["--examples", "5"],
        ["--strategies", "FedECADO"],
        ["--strategies", "FedAvg", "Cheap"],
        ["--variant", "Cheap=FedAvg,tolerance=1"],
        ["--variant", "Cheap=FedECADO,tolerance"],
        ["--repeats", "0"],
        ["--checkpoint-interval", "0"],
    ],
)
def test_bad_options_are_refused(argv, capsys):
    with pytest.raises(SystemExit):
        circuit.parse_args(argv)
    error = capsys.readouterr().err
    assert "must" in error or "expected" in error or "unknown" in error


def test_a_variant_is_its_base_config_with_its_arguments():
    args = circuit.parse_args(
        [
            "--variant",
            "Cheap=AdaptiveFedECADO,curvature_probes=1,curvature_examples=8",
            "--strategies",
            "FedAvg",
            "Cheap",
        ]
    )
    settings = circuit.strategy_settings(args, circuit.settings(args, "digits"))
    assert settings["Cheap"] == {**settings["AdaptiveFedECADO"], "curvature_probes": 1, "curvature_examples": 8}
    assert circuit.base_strategy(args, "Cheap") == "AdaptiveFedECADO"
    assert circuit.base_strategy(args, "AdaptiveFedECADO-retro") == "AdaptiveFedECADO"


def timed(run_s: float, cpu_s: float) -> dict:
    """A summarized run whose times are all ``run_s`` but its CPU time, spent in its start."""
    times = dict.fromkeys(("round_s", "client_s", "server_s", "other_s", "curvature_estimates"), run_s)
    parts = {"start": run_s, "clients": 0.0, "server": 0.0, "other": 0.0}
    return {**times, "run_s": run_s, "cpu_s": cpu_s, "parts": parts}


def test_a_run_splits_into_its_start_and_its_later_rounds_phases_and_each_parts_excess_is_over_fedavgs_run():
    results = [
        {
            "round_times": [0.5, 0.3, 0.4],
            "client_times": [0.4, 0.2, 0.25],
            "server_times": [0.01, 0.02, 0.05],
            "run_seconds": 2.0,
            "run_cpu_seconds": 3.0,
            "curvature_estimates": [0, 0, 0],
            "server_steps": [1] * 3,
            "server_rejected": [0] * 3,
            "client_state_bytes": 0,
            "client_state_clients": 0,
            "threads": 1,
            "device": "cpu",
            "params": 1,
        }
    ]
    parts = circuit.summarize(results)["parts"]
    assert parts == pytest.approx({"start": 2.0 - 0.7, "clients": 0.45, "server": 0.07, "other": 0.7 - 0.45 - 0.07})
    baseline = {**timed(2.0, 1.0), "parts": {"start": 1.0, "clients": 0.6, "server": 0.1, "other": 0.3}}
    run = {**timed(2.6, 1.0), "parts": {"start": 1.2, "clients": 0.9, "server": 0.2, "other": 0.3}}
    row = circuit.combine([run], [baseline])
    assert row["extra"] == pytest.approx({"start": 0.1, "clients": 0.15, "server": 0.05, "other": 0.0})
    assert sum(row["extra"].values()) == pytest.approx(row["run_ratio"] - 1)


def test_repeats_give_median_times_and_the_median_of_each_repeats_own_ratio():
    baselines = [timed(1.0, 2.0), timed(4.0, 2.0), timed(2.0, 4.0)]
    row = circuit.combine([timed(1.5, 2.0), timed(2.2, 3.0), timed(3.0, 4.0)], baselines)
    assert row["run_s"] == 2.2 and row["cpu_s"] == 3.0
    assert row["run_ratio_each"] == [1.5, pytest.approx(0.55), 1.5] and row["run_ratio"] == 1.5
    assert row["cpu_ratio_each"] == [1.0, 1.5, 1.0] and row["cpu_ratio"] == 1.0
    assert row["run_ratio_quartiles"] == (pytest.approx(1.025), 1.5)  # of 0.55, 1.5, 1.5: halfway to the median
    assert row["run_s"] / harness.median([b["run_s"] for b in baselines]) == pytest.approx(1.1)  # not the ratio
    failed = circuit.combine([timed(1.0, 1.0), {"failed": "exit 1: out of memory"}, timed(1.0, 1.0)], baselines)
    assert failed == {"failed": "exit 1: out of memory"}


def cells_of(line: str) -> list[str]:
    """The cells of a Markdown table's row."""
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


@pytest.mark.slow
def test_a_tiny_digits_run_prints_a_row_per_strategy_with_consistent_ratios(tmp_path):
    proc = subprocess.run([sys.executable, str(SCRIPT), *TINY], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    header = lines.index("| strategy | " + " | ".join(circuit.COLUMNS) + " |")
    rows, runs = {}, {}
    for line in lines[header + 2 : header + 6]:
        name, run_s, run_ratio, cpu_s, cpu_ratio, *cells = cells_of(line)
        assert float(cpu_s) > 0 and float(cpu_ratio) > 0
        rows[name], runs[name] = cells, (float(run_s), float(run_ratio))
    assert set(rows) == {"FedAvg", "FedECADO", "AdaptiveFedECADO", "FedECADO-cheap"}
    for name, (run_s, run_ratio) in runs.items():  # three rounds: the warm-up one and two timed ones
        assert run_s > float(rows[name][0]) and run_ratio == pytest.approx(run_s / runs["FedAvg"][0], rel=2e-3)
    seconds = {name: [float(c) for c in cells[:4]] for name, cells in rows.items()}  # round, client, server, other
    for name, (round_s, client_s, server_s, other_s) in seconds.items():
        assert all(math.isfinite(x) for x in (round_s, client_s, server_s, other_s)), rows[name]
        assert round_s > 0 and client_s > 0 and server_s > 0, rows[name]
        assert client_s + server_s <= round_s * 1.002, rows[name]
        round_ratio, server_ratio = float(rows[name][4]), float(rows[name][5])
        assert round_ratio == pytest.approx(round_s / seconds["FedAvg"][0], rel=2e-3)
        assert server_ratio == pytest.approx(server_s / seconds["FedAvg"][2], rel=2e-3)
    assert rows["FedAvg"][4:6] == ["1", "1"] and rows["FedAvg"][-1] == "0"  # FedAvg keeps no per-client state
    for name in ("FedECADO", "AdaptiveFedECADO", "FedECADO-cheap"):
        assert float(rows[name][6]) >= 1  # server steps
        assert int(rows[name][-1]) > 0  # bytes of the currents (and curvatures) of the clients that trained
    split = next(i for i, line in enumerate(lines) if line.startswith("where the extra time goes"))
    assert lines[split + 2] == "| strategy | start | clients | server | other |"
    for line in lines[split + 4 : split + 8]:  # start, clients, server, other: they add up to run/FedAvg - 1
        name, *cells = cells_of(line)
        parts = [float(x) for x in cells]
        assert sum(parts) == pytest.approx(runs[name][1] - 1, abs=3e-3), line
        if name == "FedAvg":
            assert parts == [0, 0, 0, 0]
