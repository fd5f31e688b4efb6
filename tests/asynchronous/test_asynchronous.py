"""The buffered asynchronous simulation: schedule, delay models, and runs of the `lightfed` command."""

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from lightfed.asynchronous.delays import Exponential, LogNormal, SpeedTiers
from lightfed.asynchronous.schedule import Asynchrony, BufferedSchedule
from lightfed.cli import main, run
from lightfed.core.saved_client_states import saved_client_states
from lightfed.errors import ConfigError
from tests.conftest import LIGHTFED, trainer_options
from tests.data.test_datasets import write_fake_mnist

ROOT = Path(__file__).resolve().parents[2]
DIGITS = ROOT / "configs" / "async" / "digits"
MASFL = ["--config", str(DIGITS / "base.yaml"), "--config", str(DIGITS / "masfl.yaml")]
SMALL = [
    *trainer_options(rounds=4, clients_per_round=2),
    "--asynchronous.concurrency",
    "4",
    *trainer_options(local_steps=2),
    "--data.partitioner.init_args.num_clients",
    "8",
    *trainer_options(progress_bar="false"),
]


def _simulate(concurrency: int, buffer: int = 3, clients: int = 20, rounds: int = 200, delays=None, seed: int = 0):
    """Runs the schedule alone; returns the buffers (lists of jobs) and the clients in flight after each dispatch."""
    schedule = BufferedSchedule(clients, concurrency, buffer, delays or SpeedTiers(), seed)
    schedule.start()
    buffers, in_flight = [], [[job.client_id for job in schedule.in_flight]]
    for t in range(rounds):
        buffers.append(schedule.next_buffer())
        schedule.dispatch(t + 1)
        in_flight.append([job.client_id for job in schedule.in_flight])
    return buffers, in_flight, schedule


def _staleness(buffers) -> list[list[int]]:
    return [[t - job.version for job in jobs] for t, jobs in enumerate(buffers)]


def test_concurrency_equal_to_the_buffer_is_synchronous():
    buffers, _, _ = _simulate(concurrency=3)
    assert {tau for taus in _staleness(buffers) for tau in taus} == {0}


def test_more_concurrency_gives_more_staleness():
    means = [np.mean(_staleness(_simulate(concurrency=m)[0])) for m in (3, 6, 12, 20)]
    assert means[0] == 0 and all(a < b for a, b in zip(means, means[1:], strict=False))
    assert means[-1] > 3


@pytest.mark.parametrize(
    "delays", [SpeedTiers(), Exponential(2.0), LogNormal()], ids=["tiers", "exponential", "lognormal"]
)
def test_every_aggregation_takes_exactly_s_arrivals_in_time_order_and_no_client_is_twice_in_flight(delays):
    buffers, in_flight, schedule = _simulate(concurrency=8, delays=delays)
    assert all(len(jobs) == 3 for jobs in buffers)
    assert all(len(clients) == 8 == len(set(clients)) for clients in in_flight)
    arrivals = [max(job.finish for job in jobs) for jobs in buffers]
    assert arrivals == sorted(arrivals) and schedule.clock == arrivals[-1]
    for jobs, clients in zip(buffers, in_flight, strict=False):  # an arriving job was in flight, and only once
        assert {job.client_id for job in jobs} <= set(clients)
    assert all(
        min(job.finish for job in jobs) >= previous for jobs, previous in zip(buffers[1:], arrivals, strict=False)
    )


def test_the_schedule_is_a_function_of_the_seed_and_resumes_exactly():
    first, _, _ = _simulate(concurrency=6, seed=1)
    assert first == _simulate(concurrency=6, seed=1)[0] and first != _simulate(concurrency=6, seed=2)[0]
    _, _, halfway = _simulate(concurrency=6, rounds=100, seed=1)
    resumed = BufferedSchedule(20, 6, 3, SpeedTiers(), seed=1)
    resumed.load_state_dict(halfway.state_dict())
    rest = []
    for t in range(100, 200):
        rest.append(resumed.next_buffer())
        resumed.dispatch(t + 1)
    assert rest == first[100:]


def test_speed_tiers_follow_the_dirichlet_argmax_and_their_bounds():
    tiers = SpeedTiers()
    tiers.setup(3000, np.random.default_rng(0))
    shares = np.bincount(tiers.tiers, minlength=3) / 3000
    assert shares[0] > shares[1] > shares[2] > 0.05  # Dirichlet(3, 2, 1): tier 1 most common
    rng = np.random.default_rng(1)
    for client_id in range(30):
        low, high = tiers.bounds[tiers.tiers[client_id]]
        assert low <= tiers.duration(client_id, rng) <= high


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: SpeedTiers(bounds=[[1, 2]], tier_weights=[1, 1]), "as many tier_weights as bounds"),
        (lambda: SpeedTiers(bounds=[[3, 2], [4, 5]], tier_weights=[1, 1]), "0 < low <= high"),
        (lambda: Exponential(0.0), "delays.mean must be > 0"),
        (lambda: LogNormal(sigma=-1.0), "must be >= 0"),
        (lambda: BufferedSchedule(10, 3, 4, Exponential(), 0), r"S=4\) <= asynchronous.concurrency \(M_c=3\)"),
        (lambda: BufferedSchedule(10, 11, 4, Exponential(), 0), r"<= number of clients \(10\)"),
    ],
)
def test_bad_delay_and_concurrency_settings_are_refused(build, message):
    with pytest.raises(ConfigError, match=message):
        build()


# ----------------------------------------------------------------- the command


def _fit(tmp_path, *overrides: str) -> dict[str, float]:
    return run(["fit", *MASFL, *SMALL, "--trainer.root_dir", str(tmp_path), *overrides])


def test_tensorboard_holds_staleness_virtual_time_and_accuracy_per_aggregation_and_against_time_and_test_reads_it_back(
    tmp_path,
):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from tests.run.test_round_tensorboard import time_series_groups

    metrics = _fit(tmp_path, "--trainer.eval_interval", "1")
    events = EventAccumulator(str(tmp_path / "digits-async-masfl" / "version_0")).Reload()
    tags = set(events.Tags()["scalars"])
    expected = {"~async/staleness_max", "~async/staleness_mean", "~async/virtual_time", "curves/val_acc"}
    assert expected | {"vs_time/val_acc"} <= tags
    assert [e.step for e in events.Scalars("curves/val_acc")] == [1, 2, 3, 4]
    clock = [e.value for e in events.Scalars("~async/virtual_time")]
    assert [e.step for e in events.Scalars("vs_time/val_acc")] == [round(1000 * t) for t in clock]
    assert [e.value for e in events.Scalars("vs_time/val_acc")] == [e.value for e in events.Scalars("curves/val_acc")]
    assert clock == sorted(clock) and metrics["async/virtual_time"] == pytest.approx(clock[-1])
    assert [e.value for e in events.Scalars("~round/clients")] == [2.0] * 4
    assert max(e.value for e in events.Scalars("~async/staleness_max")) >= 1
    assert list(time_series_groups(tmp_path / "digits-async-masfl" / "version_0"))[:2] == ["curves", "vs_time"]
    # the saved config (with its asynchronous section) evaluates the run's last model
    run_dir = tmp_path / "digits-async-masfl" / "version_0"
    assert "concurrency: 4" in (run_dir / "config.yaml").read_text()
    tested = run(["test", "--config", str(run_dir / "config.yaml"), "--ckpt_path", "last"])
    assert tested["test_acc"] == pytest.approx(metrics["val_acc"], abs=1e-6)


def test_resumed_run_gives_the_model_and_state_of_an_uninterrupted_one(tmp_path):
    _fit(tmp_path / "straight", "--trainer.name", "run")
    _fit(tmp_path / "resumed", "--trainer.name", "run", "--trainer.rounds", "2")
    _fit(tmp_path / "resumed", "--trainer.name", "run", "--ckpt_path", "last")

    def checkpoint(folder):
        path = tmp_path / folder / "run" / "version_0" / "checkpoints" / "last.ckpt"
        return {**torch.load(path, weights_only=False), "client_states": saved_client_states(path)}

    straight, resumed = checkpoint("straight"), checkpoint("resumed")
    assert straight["round"] == resumed["round"] == 4
    assert torch.equal(straight["params"], resumed["params"])
    assert straight["source"]["schedule"] == resumed["source"]["schedule"]
    for name in ("c", "g"):
        assert torch.equal(straight["strategy"][name], resumed["strategy"][name])
    assert straight["client_states"].keys() == resumed["client_states"].keys()
    assert all(torch.equal(s["c"], resumed["client_states"][i]["c"]) for i, s in straight["client_states"].items())
    assert straight["source"]["versions"].keys() == resumed["source"]["versions"].keys()


@pytest.mark.parametrize(
    "config",
    sorted(p for p in (ROOT / "configs" / "async").glob("*/*.yaml") if p.stem != "base"),
    ids=lambda path: f"{path.parent.name}-{path.stem}",
)
def test_every_async_config_trains(tmp_path, config):
    """Digits configs as they are (shortened); Fashion-MNIST configs on fake files in torchvision's layout."""
    overrides = []
    if config.parent.name == "fmnist":
        write_fake_mnist(tmp_path / "data" / "FashionMNIST" / "raw", n=64, rng=np.random.default_rng(0))
        overrides = [
            "--data.dataset.init_args.root",
            str(tmp_path / "data"),
            "--data.partitioner.init_args.min_size",
            "4",
            "--data.batch_size",
            "8",
            "--model.init_args.width",
            "4",
            *trainer_options(accelerator="cpu"),
        ]
    layers = ["--config", str(config.with_name("base.yaml")), "--config", str(config)]
    metrics = run(
        [
            "fit",
            *layers,
            *SMALL,
            *trainer_options(rounds=2, eval_interval=1, root_dir=str(tmp_path / "runs")),
            *overrides,
        ]
    )
    assert metrics["round/clients"] == 2 and 0 <= metrics["val_acc"] <= 1


def _error_of(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exit:
        main(argv)
    assert exit.value.code == 2
    err = capsys.readouterr().err  # may also hold a warning of Fabric's: the error itself is one line, no traceback
    assert "Traceback" not in err and err.count("lightfed: error:") == 1
    return err


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["--strategy", "lightfed.strategies.FedAvg"], "FedAvg is synchronous; with `asynchronous:` use"),
        (["--asynchronous.concurrency", "1"], "(S=2) <= asynchronous.concurrency (M_c=1)"),
        (
            [
                *trainer_options(local_steps="null", local_epochs=1),
                "--strategy",
                "lightfed.strategies.AdaMasFL",
            ],
            "set trainer.local_steps",
        ),
        (["--model.optimizer.momentum", "0.9"], "MasFL assumes plain SGD local steps (x <- x - lr g)"),
        (
            ["--trainer.privacy", "lightfed.privacy.DPSGD", "--trainer.privacy.noise_multiplier", "1"],
            "trainer.privacy is not supported with `asynchronous:` yet",
        ),
    ],
)
def test_bad_asynchronous_settings_get_one_line(tmp_path, capsys, overrides, message):
    assert message in _error_of(["fit", *MASFL, *SMALL, "--trainer.root_dir", str(tmp_path), *overrides], capsys)


def test_asynchronous_strategy_without_the_asynchronous_section_is_refused(tmp_path, capsys):
    settings = yaml.safe_load((DIGITS / "base.yaml").read_text())
    del settings["asynchronous"]
    config = tmp_path / "sync.yaml"
    config.write_text(yaml.safe_dump(settings))
    err = _error_of(["fit", "--config", str(config), *MASFL[2:], "--trainer.root_dir", str(tmp_path)], capsys)
    assert "MasFL is asynchronous: add an `asynchronous:` section" in err


@pytest.mark.slow
def test_two_processes_give_the_weights_and_client_states_of_one(tmp_path):
    """Client i trains on process i % 2, where its control variate lives; the schedule is the same on both, and
    both processes hold the same global weights after every aggregation (check_replicas)."""
    _fit(tmp_path / "one", "--trainer.name", "run")
    subprocess.run(
        [
            *LIGHTFED,
            "fit",
            *MASFL,
            *SMALL,
            *trainer_options(name="run", devices=2, check_replicas="true", root_dir=str(tmp_path / "two")),
        ],
        check=True,
        cwd=tmp_path,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        timeout=300,
    )
    paths = [tmp_path / n / "run" / "version_0" / "checkpoints" / "last.ckpt" for n in ("one", "two")]
    one, two = ({**torch.load(path, weights_only=False), "client_states": saved_client_states(path)} for path in paths)
    assert one["round"] == two["round"] == 4 and one["source"]["schedule"] == two["source"]["schedule"]
    assert (one["params"] - two["params"]).abs().max() <= 1e-5
    assert one["client_states"].keys() == two["client_states"].keys() and len(one["client_states"]) == 8
    for client_id, state in one["client_states"].items():
        assert (state["c"] - two["client_states"][client_id]["c"]).abs().max() <= 1e-5


def test_each_asynchrony_gets_its_own_default_delays():
    """A shared default instance would carry one run's client speed tiers into the next."""
    from lightfed.asynchronous.delays import SpeedTiers

    first, second = Asynchrony(), Asynchrony()
    assert isinstance(first.delays, SpeedTiers) and first.delays is not second.delays
