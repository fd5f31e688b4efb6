"""scripts/harness.py: medians and ratios worked out by hand on given timings, the repeats' order, the round clock's
periods, the Markdown table, the figures written as JSON and read back, and the options it shares."""

import argparse
import json
import math

import harness
import pytest

# three repeats of two works, in seconds; by hand: medians 0.2 and 0.5, ratio 2.5; each repeat's own ratios
# 0.62 / 0.30 = 2.0667, 0.30 / 0.10 = 3 and 0.50 / 0.20 = 2.5, their median 2.5, quartiles halfway to it
FEDAVG = [0.30, 0.10, 0.20]
FEDECADO = [0.62, 0.30, 0.50]


def test_medians_and_ratios_to_the_named_reference():
    medians = {"FedAvg": harness.median(FEDAVG), "FedECADO": harness.median(FEDECADO)}
    assert medians == {"FedAvg": 0.20, "FedECADO": 0.50}
    assert harness.ratios(medians, "FedAvg") == {"FedAvg": 1.0, "FedECADO": 2.5}
    assert harness.ratios(medians, "FedECADO") == {"FedAvg": 0.4, "FedECADO": 1.0}
    each = harness.paired_ratios(FEDECADO, FEDAVG)
    assert each == pytest.approx([2.0 + 1 / 15, 3.0, 2.5])
    assert harness.median(each) == pytest.approx(2.5)
    assert harness.quartiles(each) == pytest.approx((2.0 + 1 / 15 + (2.5 - 2.0 - 1 / 15) / 2, 2.75))
    with pytest.raises(ValueError):
        harness.paired_ratios([1.0, 2.0], [1.0])  # a repeat without its reference


def test_the_median_leaves_out_nan_and_of_an_even_count_is_the_mean_of_the_middle_two():
    assert harness.median([4.0, 1.0, 3.0, 2.0]) == 2.5
    assert harness.median([math.nan, 3.0, 1.0]) == 2.0
    assert math.isnan(harness.median([math.nan])) and math.isnan(harness.median([]))


def test_times_hold_each_repeats_wall_and_cpu_seconds():
    times = harness.Times()
    for wall, cpu in zip(FEDECADO, [0.5, 0.2, 0.4], strict=True):
        times.add(wall, cpu)
    assert (times.median, times.cpu_median, times.best, times.cpu_best) == (0.5, 0.4, 0.3, 0.2)
    assert times[1:] == harness.Times([0.30, 0.50], [0.2, 0.4])  # the first repeat left out (a warm-up)
    times.extend(harness.Times([0.1], [0.1]))
    assert times.best == 0.1 and len(times.wall) == len(times.cpu) == 4


def test_a_measurement_waits_for_the_device_before_each_reading_and_returns_the_result():
    calls = []
    times = harness.Times()
    result = times.measure(lambda: calls.append("work") or 7, sync=lambda: calls.append("sync"))
    assert result == 7 and calls == ["sync", "work", "sync"]
    assert len(times.wall) == 1 and times.wall[0] >= 0 and times.cpu[0] >= 0


def test_repeats_are_interleaved_after_the_warm_up_and_may_alternate():
    assert list(harness.interleave(["a", "b"], 2)) == [(0, "a"), (0, "b"), (1, "a"), (1, "b")]
    assert list(harness.interleave(["a", "b", "c"], 3, alternate=True)) == [
        (0, "a"), (0, "b"), (0, "c"), (1, "c"), (1, "b"), (1, "a"), (2, "a"), (2, "b"), (2, "c"),
    ]  # fmt: skip
    calls = []
    work = {name: (lambda name=name: calls.append(name)) for name in ("a", "b")}
    times = harness.time_interleaved(work, repeats=3, warmup=1, alternate=True)
    assert calls == ["a", "b", "a", "b", "b", "a", "a", "b"]  # one untimed round first
    assert {name: len(measured.wall) for name, measured in times.items()} == {"a": 3, "b": 3}


class Trainer:
    round = 0


def test_the_round_clock_gives_each_rounds_span_and_period():
    clock = harness.RoundClock()
    clock.on_fit_start(Trainer())
    clock.on_round_start(Trainer(), 0)
    clock.on_round_end(Trainer(), 0, {"loss": 1.0})
    assert clock.began is not None and len(clock.starts) == len(clock.ends) == 1 and clock.metrics == [{"loss": 1.0}]
    clock.began, clock.starts, clock.ends = (0.0, 0.0), [(0.2, 0.1), (1.5, 0.9)], [(1.0, 0.5), (3.0, 1.5)]
    assert clock.rounds() == harness.Times([0.8, 1.5], [0.4, pytest.approx(0.6)])  # start to end
    assert clock.periods() == harness.Times([1.0, 2.0], [0.5, 1.0])  # end to end, the first from the start of fit
    started = harness.RoundClock()
    started.start()
    began = started.began
    started.on_fit_start(Trainer())
    assert started.began == began  # started before fit: the set-up inside fit is in the first period


def test_the_markdown_table_escapes_bars_and_keeps_empty_cells():
    table = harness.markdown_table(["name", "max |w|", "s"], [["a", "1", ""], ["b", 2.5, "-"]], align="llr")
    assert table.splitlines() == ["| name | max \\|w\\| | s |", "|---|---|---:|", "| a | 1 | |", "| b | 2.5 | - |"]
    assert harness.markdown_table(["x", "y"]) == "| x | y |\n|---|---|"
    assert harness.markdown_row(["mean staleness", "", 0.5]) == "| mean staleness | | 0.5 |"
    assert [harness.cell(v) for v in (None, math.nan, "text", 0.123456, 12345678.0)] == [
        "-", "-", "text", "0.1235", "1.235e+07",
    ]  # fmt: skip
    assert harness.cell(0.5, ".3f", missing="") == "0.500" and harness.cell(None, missing="") == ""


def test_the_figures_are_written_as_json_and_read_back(tmp_path):
    parser = argparse.ArgumentParser()
    harness.add_json_option(parser)
    path = tmp_path / "out" / "figures.json"
    args = parser.parse_args(["--json", str(path)])
    figures = {"medians": {"FedAvg": 0.2, "FedECADO": 0.5}, "each": [2.0, math.nan, math.inf], "quartiles": (1.0, 2.0)}
    harness.write_json(args.json, figures)
    assert "NaN" not in path.read_text()  # JSON has no NaN: null, as for a figure not measured
    assert json.loads(path.read_text()) == {
        **figures,
        "each": [2.0, None, None],
        "quartiles": [1.0, 2.0],
    }  # a tuple: a list
    harness.write_json(parser.parse_args([]).json, figures)  # without --json: nothing written
    assert [p.name for p in tmp_path.rglob("*") if p.is_file()] == ["figures.json"]


def test_options_are_checked_and_handed_on(capsys):
    parser = argparse.ArgumentParser()
    args = argparse.Namespace(rounds=0, clients_per_round=None, warmup_rounds=0, lr=0.5)
    harness.require_at_least(parser, args, 0, "rounds", "warmup_rounds", "clients_per_round")
    with pytest.raises(SystemExit):
        harness.require_at_least(parser, args, 1, "clients_per_round", "rounds")
    assert "--rounds must be >= 1" in capsys.readouterr().err
    assert harness.option_words(args, ["clients_per_round", "lr", "rounds"]) == ["--lr", "0.5", "--rounds", "0"]
    assert (
        harness.command_line("scripts/benchmarks/data_benchmark.py", ["--a", "1"])
        == "python scripts/benchmarks/data_benchmark.py --a 1"
    )
