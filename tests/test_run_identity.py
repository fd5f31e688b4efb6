"""A run's identity: its own folder (claimed atomically), its own config naming that folder, and a resume refused
when it would change what the run computes."""

import json
import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lightfed.callbacks import Callback
from lightfed.cli import main, run
from lightfed.data import Digits, DirichletPartitioner
from lightfed.data.module import FederatedDataModule
from lightfed.errors import ConfigError
from lightfed.run.fingerprint import RESUMABLE, check_fingerprint, fingerprint
from lightfed.run.run_folder import claim_run_folder
from lightfed.strategies import FedAvg
from tests.conftest import LIGHTFED, small_data, small_model, small_trainer, trainer_options

TINY = """
seed_everything: 0
trainer: {accelerator: cpu, rounds: 2, clients_per_round: 4, local_epochs: null, local_steps: 2, name: tiny,
          progress_bar: false, logger: false}
model: {class_path: lightfed.models.SmallCNN,
        init_args: {width: 8, optimizer: {class_path: torch.optim.SGD, init_args: {lr: 0.1}}}}
data:
  partitioner: {class_path: lightfed.data.DirichletPartitioner, init_args: {num_clients: 8, alpha: 0.5}}
  batch_size: 16
strategy: {class_path: lightfed.strategies.FedAvg}
"""


@pytest.fixture
def tiny(tmp_path) -> list[str]:
    """``--config`` of a 2-round digits run whose runs go under ``tmp_path/runs``."""
    config = tmp_path / "tiny.yaml"
    config.write_text(TINY)
    return ["--config", str(config), "--trainer.root_dir", str(tmp_path / "runs")]


def _refused(capsys, *argv: str) -> str:
    """The one line ``lightfed`` prints when it refuses ``argv`` (exit status 2)."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit:
        main(list(argv))
    assert exit.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lightfed: error: ")
    return lines[0]


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


def _rounds(run: Path) -> list[int]:
    return [
        json.loads(line)["round"]
        for line in (run / "metrics.jsonl").read_text().splitlines()
        if line.startswith('{"round"')
    ]


def test_a_runs_own_config_names_its_folder_and_last_means_that_run(tiny, tmp_path, capsys):
    first = run(["fit", *tiny])
    run(["fit", *tiny, "--trainer.rounds", "1", "--seed_everything", "1"])  # a newer run of the same experiment
    runs = tmp_path / "runs" / "tiny"
    own = runs / "version_0" / "config.yaml"
    assert yaml.safe_load(own.read_text())["trainer"]["version"] == 0
    assert yaml.safe_load((runs / "version_1" / "config.yaml").read_text())["trainer"]["version"] == 1
    capsys.readouterr()
    tested = run(["validate", "--config", str(own), "--ckpt_path", "last"])
    assert f"evaluated: {runs / 'version_0'}" in capsys.readouterr().out
    assert tested["val_acc"] == first["val_acc"]  # version_1 (1 round, another seed) would give another accuracy
    run(["fit", "--config", str(own), "--ckpt_path", "last", "--trainer.rounds", "3"])
    assert _rounds(runs / "version_0") == [1, 2, 3] and _rounds(runs / "version_1") == [1]


def test_a_fresh_run_with_an_existing_version_is_refused_without_writing(tiny, tmp_path, capsys):
    run(["fit", *tiny])
    folder = tmp_path / "runs" / "tiny" / "version_0"
    before = _snapshot(folder)
    line = _refused(capsys, "fit", "--config", str(folder / "config.yaml"))
    assert "exists already" in line and "--trainer.version null" in line
    assert _snapshot(folder) == before


def test_a_file_in_the_place_of_a_version_is_skipped(tmp_path):
    (tmp_path / "version_0").mkdir()
    (tmp_path / "version_1").write_text("not a run")
    assert claim_run_folder(tmp_path) == tmp_path / "version_2"
    with pytest.raises(ConfigError, match="exists already"):
        claim_run_folder(tmp_path, version=1)
    (tmp_path / "taken").write_text("a file")
    with pytest.raises(ConfigError, match="cannot make the run folder"):
        claim_run_folder(tmp_path / "taken")


def _claim_after(barrier, experiment: Path, claimed) -> None:
    barrier.wait()
    claimed.put(claim_run_folder(experiment).name)


def test_runs_claiming_at_the_same_moment_get_folders_of_their_own(tmp_path):
    """Eight processes released together (the version listed by the one before the other's folder exists: the
    earlier "list the versions, then make the next one" gave some of them the same folder)."""
    context = multiprocessing.get_context("fork")
    barrier, claimed = context.Barrier(8, timeout=300), context.Queue()
    processes = [context.Process(target=_claim_after, args=(barrier, tmp_path / "exp", claimed)) for _ in range(8)]
    for process in processes:
        process.start()
    names = sorted(claimed.get(timeout=300) for _ in processes)
    for process in processes:
        process.join(timeout=300)
    assert names == sorted(f"version_{n}" for n in range(8))


@pytest.mark.slow
def test_four_runs_started_at_once_with_one_name_get_four_folders(tmp_path):
    config = tmp_path / "tiny.yaml"
    config.write_text(TINY)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    runs = [
        subprocess.Popen(
            [
                *LIGHTFED,
                "fit",
                "--config",
                str(config),
                *trainer_options(root_dir=str(tmp_path / "runs")),
                "--seed_everything",
                str(seed),
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for seed in range(4)
    ]
    outputs = [process.communicate(timeout=900)[0].decode() for process in runs]
    assert [process.returncode for process in runs] == [0] * 4, outputs
    folders = sorted((tmp_path / "runs" / "tiny").iterdir())
    assert [folder.name for folder in folders] == [f"version_{n}" for n in range(4)]
    seeds = sorted(yaml.safe_load((folder / "config.yaml").read_text())["seed_everything"] for folder in folders)
    assert seeds == [0, 1, 2, 3]
    assert all(_rounds(folder) == [1, 2] for folder in folders)
    assert sorted(output.strip().splitlines()[-1].split()[-1] for output in outputs) == [str(f) for f in folders]


RESUMES = [  # (setting changed on the resume, accepted)
    (["--data.partitioner.init_args.num_clients", "16"], False),
    (["--data.partitioner.init_args.num_clients", "5"], False),
    (["--seed_everything", "1"], False),
    (["--data.partitioner.init_args.alpha", "0.1"], False),
    (["--data.partitioner", "lightfed.data.IIDPartitioner", "--data.partitioner.num_clients", "8"], False),
    (["--strategy", "lightfed.strategies.FedProx"], False),
    (["--strategy.init_args.server_lr", "0.5"], False),
    (["--model.init_args.optimizer.init_args.lr", "0.05"], False),
    (["--trainer.local_steps", "3"], False),
    (["--data.batch_size", "8"], False),
    (["--trainer.rounds", "4"], True),
    (["--trainer.rounds", "4", "--trainer.checkpoint_interval", "2", "--trainer.eval_interval", "2"], True),
    (["--trainer.rounds", "4", "--trainer.logger", "true", "--trainer.progress_bar", "true"], True),
    (["--trainer.rounds", "4", "--data.eval_batch_size", "7", "--trainer.clients_in_parallel", "1"], True),
]


@pytest.mark.parametrize("changes, accepted", RESUMES)
def test_a_resume_with_other_settings_is_refused_and_leaves_the_run_folder_as_it_was(
    tiny, tmp_path, capsys, changes, accepted
):
    run(["fit", *tiny])
    folder = tmp_path / "runs" / "tiny" / "version_0"
    own = ["--config", str(folder / "config.yaml"), "--ckpt_path", "last"]
    before = _snapshot(folder)
    if accepted:
        run(["fit", *own, *changes])
        assert _rounds(folder) == [1, 2, 3, 4]
        return
    line = _refused(capsys, "fit", *own, *changes)
    assert "was written with other settings" in line
    assert _snapshot(folder) == before


def test_the_refusal_names_the_changed_keys():
    saved = fingerprint(yaml.safe_load(TINY))
    changed = yaml.safe_load(TINY)
    changed["data"]["partitioner"]["init_args"]["num_clients"] = 40
    changed["trainer"]["rounds"] = 9  # may change
    with pytest.raises(ConfigError, match=r"\(data\.partitioner\.init_args\.num_clients 8 -> 40\)"):
        check_fingerprint(saved, fingerprint(changed), "last.ckpt")
    check_fingerprint(saved, fingerprint({**changed, "strategy": {"class_path": "other"}}), "x", evaluation=True)
    assert not any(key.startswith(RESUMABLE) for key in fingerprint(changed))
    evaluated_otherwise = yaml.safe_load(TINY)
    evaluated_otherwise["trainer"].update(client_eval_clients=3, client_eval_finetune_steps=5)  # not what it computes
    check_fingerprint(saved, fingerprint(evaluated_otherwise), "last.ckpt")


def test_rounds_below_the_checkpoints_are_refused_and_equal_ones_do_nothing(tiny, tmp_path, capsys):
    run(["fit", *tiny])
    folder = tmp_path / "runs" / "tiny" / "version_0"
    own = ["--config", str(folder / "config.yaml"), "--ckpt_path", "last"]
    before = _snapshot(folder)
    assert "set trainer.rounds above 2" in _refused(capsys, "fit", *own, "--trainer.rounds", "1")
    run(["fit", *own])
    assert "the run is complete" in capsys.readouterr().out
    assert _snapshot(folder) == before


def test_evaluating_a_checkpoint_with_other_data_or_seed_is_refused(tiny, tmp_path, capsys):
    run(["fit", *tiny])
    checkpoint = str(tmp_path / "runs" / "tiny" / "version_0" / "checkpoints" / "last.ckpt")
    line = _refused(capsys, "test", *tiny, "--ckpt_path", checkpoint, "--seed_everything", "3")
    assert "seed_everything 0 -> 3" in line
    run(["test", *tiny, "--ckpt_path", checkpoint, "--strategy", "lightfed.strategies.FedProx"])  # not evaluated


def test_the_checkpointed_round_lost_from_metrics_by_a_kill_is_written_on_resume(tiny, tmp_path):
    run(["fit", *tiny])
    folder = tmp_path / "runs" / "tiny" / "version_0"
    metrics = folder / "metrics.jsonl"
    lines = metrics.read_text().splitlines()
    metrics.write_text(lines[0] + "\n")  # killed after round 2's checkpoint, before its line
    run(["fit", "--config", str(folder / "config.yaml"), "--ckpt_path", "last", "--trainer.rounds", "3"])
    assert _rounds(folder) == [1, 2, 3]
    assert json.loads(metrics.read_text().splitlines()[1]) == json.loads(lines[1])


def test_from_python_a_resume_with_another_validation_split_is_refused(tmp_path):
    def data(val_fraction: float) -> FederatedDataModule:
        return FederatedDataModule(
            Digits(), DirichletPartitioner(8, alpha=0.5), batch_size=16, val_fraction=val_fraction
        )

    small_trainer(tmp_path, rounds=1).fit(small_model(), data(0.1), FedAvg())
    with pytest.raises(ConfigError, match=r"data\.val_fraction 0\.1 -> 0\.2"):
        small_trainer(tmp_path, rounds=2).fit(small_model(), data(0.2), FedAvg(), ckpt_path="last")
    small_trainer(tmp_path, rounds=2).fit(small_model(), data(0.1), FedAvg(), ckpt_path="last")


def test_from_python_a_resume_with_another_optimizer_is_refused(tmp_path):
    small_trainer(tmp_path, rounds=1).fit(small_model(lr=0.1), small_data(), FedAvg())
    with pytest.raises(ConfigError, match=r"model\.init_args\.optimizer\.init_args\.lr 0\.1 -> 0\.5"):
        small_trainer(tmp_path, rounds=2).fit(small_model(lr=0.5), small_data(), FedAvg(), ckpt_path="last")
    small_trainer(tmp_path, rounds=2).fit(small_model(lr=0.1), small_data(), FedAvg(), ckpt_path="last")


def test_a_run_folder_in_use_by_another_process_is_refused_until_that_process_dies(tiny, tmp_path, capsys):
    run(["fit", *tiny])
    folder = tmp_path / "runs" / "tiny" / "version_0"
    holder = subprocess.Popen(  # another resume of the run, in the middle of it
        [
            sys.executable,
            "-c",
            "import sys; from pathlib import Path; from lightfed.run.run_output import in_use_check; "
            "lock = in_use_check(Path(sys.argv[1])); print('held', flush=True); sys.stdin.read()",
            str(folder),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline() == "held\n"
    before = _snapshot(folder)
    line = _refused(capsys, "fit", *tiny, "--ckpt_path", "last", "--trainer.rounds", "3")
    assert (
        line == f"lightfed: error: the run folder {folder} is in use by process {holder.pid}: wait until that "
        "run ends or stop it, then resume with --ckpt_path last"
    )
    assert _snapshot(folder) == before
    holder.kill()  # a killed process leaves no lock behind
    holder.wait(timeout=300)
    capsys.readouterr()
    run(["fit", *tiny, "--ckpt_path", "last", "--trainer.rounds", "3"])
    assert f"resuming {folder} from round 2 of 3 (started for 2)\n" in capsys.readouterr().out
    assert _rounds(folder) == [1, 2, 3]


class StopAfterRound2(Callback):
    def on_round_end(self, trainer, round, metrics):
        trainer.should_stop = trainer.should_stop or trainer.round == 2


def test_a_resume_says_the_rounds_it_goes_to_and_those_the_run_was_started_for(tmp_path, capsys):
    small_trainer(tmp_path, rounds=6, callbacks=[StopAfterRound2()]).fit(small_model(), small_data(), FedAvg())
    folder = tmp_path / "lightfed" / "version_0"
    capsys.readouterr()
    small_trainer(tmp_path, rounds=3).fit(small_model(), small_data(), FedAvg(), ckpt_path="last")
    assert f"resuming {folder} from round 2 of 3 (started for 6)\n" in capsys.readouterr().out
    small_trainer(tmp_path, rounds=6).fit(small_model(), small_data(), FedAvg(), ckpt_path="last")
    assert f"resuming {folder} from round 3 of 6\n" in capsys.readouterr().out  # started for 6, as it goes on


def test_a_monitor_the_validation_does_not_log_is_named_once_and_may_change_on_a_resume(tiny, tmp_path, capsys):
    run(["fit", *tiny, "--trainer.rounds", "1", "--trainer.monitor", "val_accuracy"])
    folder = tmp_path / "runs" / "tiny" / "version_0"
    warned = [line for line in capsys.readouterr().out.splitlines() if line.startswith("lightfed: warning:")]
    assert warned == [
        "lightfed: warning: trainer.monitor 'val_accuracy' was not logged in round 1, whose validation logged "
        "val_acc, val_loss: the final report has no best round's test metrics without it; set trainer.monitor to "
        "one of them (a resume may change it while no round was chosen on it)"
    ]
    own = ["--config", str(folder / "config.yaml"), "--ckpt_path", "last"]
    run(["fit", *own, "--trainer.rounds", "2", "--trainer.monitor", "val_acc"])  # no round was chosen on it
    assert "lightfed: warning" not in capsys.readouterr().out and _rounds(folder) == [1, 2]
    final = json.loads((folder / "metrics.jsonl").read_text().splitlines()[-1])
    assert final["monitor"] == "val_acc" and final["best_round"] == 2  # round 1 was not chosen on it: not kept
    line = _refused(capsys, "fit", *own, "--trainer.rounds", "3", "--trainer.monitor", "val_loss")
    assert 'trainer.monitor "val_acc" -> "val_loss"' in line  # once a round was chosen on it, it may not change
