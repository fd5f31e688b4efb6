"""The job scripts in SLURM/ on a real SLURM: a cluster of two nodes on this one host (munged, slurmctld, and one
slurmd per node, each at its own port of 127.0.0.1) that this module starts in a temporary folder and stops at the end.

- a 2-process job (single_node.sbatch, srun, CPU) logs once and ends with the weights of a 1-process run;
- a job warned with SIGUSR1 (multi_node.sbatch on one node) checkpoints, requeues itself, resumes from the
  checkpoint and ends with the weights of an uninterrupted run;
- a sweep as a job array (submit_sweep.sh) runs one compare.py run per task, a warned task resumes after its
  requeue, and the dependent job collects the table;
- a job on two nodes (multi_node.sbatch, 2 nodes x 1 process) meets at its first node, writes one per-process
  checkpoint file from each node, is requeued mid-run with ``scontrol requeue``, resumes, and ends with the weights
  of the same job on one node with two processes.

Needs root and the Debian packages slurmctld, slurmd, slurm-client and munge (.ci/run installs them); skipped when
they are missing. On a failure the test prints the job's output and the daemons' logs.
"""

import contextlib
import json
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
import yaml

from lightfed.core.process_states import FOLDER
from tests.conftest import trainer_options

REPO = Path(__file__).resolve().parents[2]
SLURM_DIR = REPO / "SLURM"
QUICKSTART = "configs/quickstart.yaml"
SEARCH_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/local/sbin", "/usr/sbin", "/sbin"])
NEEDED = ["munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel", "sinfo", "runuser"]
# the tiny digits federation of the tests: quickstart without per-client evaluation
QUICK = ["--trainer.client_eval_interval", "0"]


# ----------------------------------------------------------------- the cluster


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _clean_env() -> dict[str, str]:
    """This process's environment without any SLURM job's variables (pytest may itself run inside a job)."""
    prefixes = ("SLURM_", "SBATCH_", "SRUN_", "SALLOC_")
    return {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}


def _alive(pid: int) -> bool:
    """Running and not a zombie (PID 1 may reap stopped daemons slowly)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return not re.search(r"^State:\s+Z", status, re.M)


def _stop(pid_file: Path, timeout: float = 10) -> None:
    try:
        pid = int(pid_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 3)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.1)
        if not _alive(pid):
            return


def _tail(path: Path, lines: int = 60) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as error:
        return f"({error})"


@dataclass
class Cluster:
    root: Path
    env: dict[str, str]
    nodes: list[str]
    logs: list[Path] = field(default_factory=list)

    def cmd(self, *args: str, timeout: float = 30, check: bool = True, env: dict | None = None) -> str:
        result = subprocess.run(
            args, env={**self.env, **(env or {})}, cwd=REPO, capture_output=True, text=True, timeout=timeout
        )
        if check and result.returncode != 0:
            raise AssertionError(f"{' '.join(args)} failed ({result.returncode}):\n{result.stdout}{result.stderr}")
        return result.stdout

    def sbatch(self, script: str, options: list[str], args: list[str], env: dict | None = None) -> str:
        """Submits SLURM/<script> from the repository root; returns the job id."""
        out = self.cmd("sbatch", "--parsable", *options, str(SLURM_DIR / script), *args, env=env)
        return out.strip().split(";")[0]

    def job(self, job_id: str) -> dict[str, str]:
        """`scontrol show job` fields of one job (or array task, as <array>_<task>)."""
        line = self.cmd("scontrol", "show", "job", "-o", job_id).splitlines()[0]
        return dict(token.split("=", 1) for token in line.split() if "=" in token)

    def queued(self, job_id: str) -> list[str]:
        """States of the job's (or array's) entries still in the queue: pending, running, completing."""
        result = subprocess.run(
            ["squeue", "-h", "-j", job_id, "-o", "%T"], env=self.env, capture_output=True, text=True, timeout=30
        )
        if result.returncode != 0:  # a job the controller has forgotten is gone; any other error: ask again
            return [] if "Invalid job id" in result.stderr else ["UNKNOWN"]
        return result.stdout.split()

    def wait(self, job_id: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.queued(job_id):
            if time.monotonic() > deadline:
                raise AssertionError(f"job {job_id} still queued after {timeout} s: {self.queued(job_id)}")
            time.sleep(0.5)

    def wait_for_file(self, path: Path, job_id: str, timeout: float) -> None:
        """Until ``path`` exists; fails when the job ends first or the time is up."""
        deadline = time.monotonic() + timeout
        while not path.exists():
            if not self.queued(job_id):
                raise AssertionError(f"job {job_id} ended without writing {path}")
            if time.monotonic() > deadline:
                raise AssertionError(f"job {job_id} wrote no {path} within {timeout} s")
            time.sleep(0.1)

    def start(self, *args: str) -> None:
        """Starts a daemon (it forks into the background); its start-up messages go to log/start.log."""
        with open(self.root / "log" / "start.log", "a") as log:
            result = subprocess.run(
                args, env=self.env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, timeout=30
            )
        if result.returncode != 0:
            raise AssertionError(f"{' '.join(args)} failed ({result.returncode})")

    @contextlib.contextmanager
    def diagnose(self, *outputs: Path):
        """On a failure inside, prints the jobs' output files (glob patterns allowed) and the daemons' logs."""
        try:
            yield
        except BaseException:
            with contextlib.suppress(Exception):
                print(self.cmd("squeue", "-a", check=False, timeout=10))
            for pattern in outputs:
                for file in sorted(pattern.parent.glob(pattern.name)) or [pattern]:
                    print(f"===== {file}\n{_tail(file, 200)}")
            for file in self.logs:
                print(f"===== {file}\n{_tail(file, 60)}")
            raise


def _node_names() -> list[str]:
    """Two nodes on this host: this host's name (the jobs' first node, where they meet: Fabric's MASTER_ADDR, so it
    must resolve) and a second name that sorts after it; one node, ``localhost``, where the host name does not
    resolve (SLURM cannot have a second node beside a ``localhost`` one)."""
    host = socket.gethostname()
    try:
        socket.gethostbyname(host)
    except OSError:
        return ["localhost"]
    return [host, f"{host}-node2"]


def _write_conf(root: Path, nodes: list[str]) -> Path:
    cpus = max(2, os.cpu_count() or 1)  # declared CPUs: 2 tasks must fit even on a 1-core machine
    # each node its own slurmd on 127.0.0.1 at its own port (a slurmd built without multiple-slurmd support needs
    # distinct NodeHostnames); %n: its own spool, pid and log
    node_lines = "\n".join(
        f"NodeName={name} NodeHostname={name} NodeAddr=127.0.0.1 Port={_free_port()} CPUs={cpus} State=UNKNOWN"
        for name in nodes
    )
    conf = root / "slurm.conf"
    conf.write_text(f"""\
ClusterName=lightfed-test
SlurmctldHost=localhost
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# our own munged; credentials expire in 5 s, else a requeued job waits ~2 minutes before it may start again
AuthInfo=cred_expire=5,socket={root}/munge/munge.socket
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd-%n.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
# pgid: the job's processes do not outlive a requeue (linuxproc leaked them)
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/filetxt
JobCompLoc={root}/log/jobcomp.txt
JobRequeue=1
MinJobAge=600
MailProg=/bin/true
MpiDefault=none
ReturnToService=2
SchedulerParameters=sched_interval=2,bf_interval=1
SlurmdParameters=config_overrides
{node_lines}
PartitionName=debug Nodes={",".join(nodes)} Default=YES MaxTime=INFINITE State=UP
""")
    return conf


@pytest.fixture(scope="module")
def cluster():
    if os.geteuid() != 0:
        pytest.skip("a single-host SLURM needs root (slurmd, munged as the munge user)")
    missing = [name for name in NEEDED if shutil.which(name, path=SEARCH_PATH) is None]
    if missing:
        pytest.skip(
            f"SLURM is not installed ({', '.join(missing)} not found): "
            "apt-get install slurmctld slurmd slurm-client munge"
        )
    try:
        munge_user = pwd.getpwnam("munge")
    except KeyError:
        pytest.skip("no munge user: apt-get install munge")

    root = Path(tempfile.mkdtemp(prefix="lightfed-slurm-"))  # short: the munge socket path must fit in sun_path
    root.chmod(0o755)
    for sub in ("state", "spool", "log", "munge"):
        (root / sub).mkdir()
    munge = root / "munge"
    key = munge / "munge.key"
    key.write_bytes(os.urandom(1024))  # our own key: independent of /etc/munge and of any running munged
    key.chmod(0o600)
    for path in (munge, key):
        os.chown(path, munge_user.pw_uid, munge_user.pw_gid)
    nodes = _node_names()
    conf = _write_conf(root, nodes)
    path = os.pathsep.join([str(Path(sys.executable).parent), SEARCH_PATH])
    env = {**_clean_env(), "SLURM_CONF": str(conf), "PATH": path, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    logs = [
        root / "log" / "start.log",
        munge / "munged.log",
        root / "log" / "slurmctld.log",
        *(root / "log" / f"slurmd-{node}.log" for node in nodes),
    ]
    c = Cluster(root, env, nodes, logs)
    try:
        with c.diagnose():
            c.start(
                "runuser",
                "-u",
                "munge",
                "--",
                "munged",
                f"--socket={munge}/munge.socket",
                f"--key-file={key}",
                f"--pid-file={munge}/munged.pid",
                f"--log-file={munge}/munged.log",
                f"--seed-file={munge}/munged.seed",
            )
            c.start("slurmctld", "-f", str(conf))
            for node in nodes:
                c.start("slurmd", "-f", str(conf), "-N", node)
            deadline = time.monotonic() + 60
            while c.cmd("sinfo", "-h", "-N", "-o", "%T", check=False).split() != ["idle"] * len(nodes):
                if time.monotonic() > deadline:
                    raise AssertionError(f"the nodes are not idle after 60 s: {c.cmd('sinfo', check=False)}")
                time.sleep(0.2)
        yield c
    finally:
        if (root / "slurmctld.pid").exists():  # cancel what a failed test left behind, before the daemons go
            with contextlib.suppress(subprocess.TimeoutExpired):
                deadline = time.monotonic() + 15
                while jobs := c.cmd("squeue", "-h", "-o", "%i", check=False, timeout=10).split():
                    if time.monotonic() > deadline:
                        break
                    c.cmd("scancel", *jobs, check=False, timeout=10)
                    time.sleep(0.5)
        for pid_file in (
            *(root / f"slurmd-{node}.pid" for node in nodes),
            root / "slurmctld.pid",
            munge / "munged.pid",
        ):
            _stop(pid_file)
        shutil.rmtree(root, ignore_errors=True)


# ----------------------------------------------------------------- helpers


@pytest.fixture
def job_env():
    """What the job scripts read: CPU processes, and the virtual environment running these tests."""
    venv = sys.prefix if (Path(sys.prefix) / "bin" / "activate").is_file() else ""
    return {"ACCELERATOR": "cpu", "VENV": venv}


CPU_JOB = ["--gpus-per-node=0", "--ntasks-per-node=2", "--cpus-per-task=1"]


def reference_params(root: Path, monkeypatch, *args: str, config: str = QUICKSTART) -> torch.Tensor:
    """Final weights of a 1-process `lightfed fit` of ``config`` (files, space-separated), run in this process (one
    thread)."""
    from lightfed.cli import run

    for name in list(os.environ):
        if name.startswith(("SLURM_", "SBATCH_", "SRUN_")):
            monkeypatch.delenv(name)  # Fabric must not take a SLURM job around pytest for its own
    run(
        [
            "fit",
            *(arg for c in config.split() for arg in ("--config", str(REPO / c))),
            *trainer_options(accelerator="cpu", progress_bar="false", root_dir=str(root), name="reference"),
            *QUICK,
            *args,
        ]
    )
    return _checkpoint(root / "reference" / "version_0" / "checkpoints" / "last.ckpt")["params"]


def _checkpoint(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=False)


def _events(path: Path, tag: str = "curves/val_acc") -> list[int]:
    """Steps at which an events file (or run folder) logged ``tag``."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(path), size_guidance={"scalars": 0}).Reload()
    return [e.step for e in events.Scalars(tag)] if tag in events.Tags()["scalars"] else []


def _event_files(version: Path) -> list[Path]:
    """The events files of a run folder, oldest first (their names hold the start time)."""
    return sorted(version.glob("events.out.tfevents.*"), key=lambda p: int(p.name.split(".")[3]))


def _assert_completed(info: dict[str, str]) -> None:
    assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0", info


# ----------------------------------------------------------------- tests


def test_two_process_job_logs_once_and_matches_one_process(cluster, tmp_path, job_env, monkeypatch):
    runs = tmp_path / "runs"
    output = tmp_path / "job-%j.out"
    job = cluster.sbatch(
        "single_node.sbatch",
        [*CPU_JOB, f"--output={output}"],
        [*QUICK, "--trainer.rounds", "3"],
        env={**job_env, "ROOT_DIR": str(runs)},
    )
    output = tmp_path / f"job-{job}.out"
    with cluster.diagnose(output):
        cluster.wait(job, timeout=300)
        _assert_completed(cluster.job(job))
        log = output.read_text()
        assert "Starting with 2 processes" in log
        # rank 0 alone logs: one run folder, one events file, one point per round
        assert [p.name for p in runs.iterdir()] == [f"lightfed-{job}"]
        versions = list((runs / f"lightfed-{job}").iterdir())
        assert [p.name for p in versions] == ["version_0"]
        assert len(_event_files(versions[0])) == 1
        assert _events(versions[0]) == [1, 2, 3]
        checkpoint = _checkpoint(versions[0] / "checkpoints" / "last.ckpt")
        assert checkpoint["round"] == 3
        expected = reference_params(tmp_path / "reference", monkeypatch, "--trainer.rounds", "3")
        assert (checkpoint["params"] - expected).abs().max() <= 1e-5


def test_fedecado_job_solves_its_circuit_sharded_over_two_processes(cluster, tmp_path, job_env, monkeypatch):
    """The circuit's server solve on the sharded path under srun: every round the same weights on both processes
    (check_replicas), and the one-process weights at the end."""
    runs, config = tmp_path / "runs", "configs/digits/base.yaml configs/digits/fedecado.yaml"
    output = tmp_path / "job-%j.out"
    args = [*QUICK, "--trainer.rounds", "2", "--trainer.clients_per_round", "4", "--trainer.local_epochs", "1"]
    job = cluster.sbatch(
        "single_node.sbatch",
        [*CPU_JOB, f"--output={output}"],
        [*args, "--trainer.check_replicas", "true"],
        env={**job_env, "ROOT_DIR": str(runs), "CONFIG": " ".join(str(REPO / c) for c in config.split())},
    )
    output = tmp_path / f"job-{job}.out"
    with cluster.diagnose(output):
        cluster.wait(job, timeout=600)
        _assert_completed(cluster.job(job))
        assert "Starting with 2 processes" in output.read_text()
        (version,) = (runs / f"lightfed-{job}").iterdir()
        checkpoint = _checkpoint(version / "checkpoints" / "last.ckpt")
        assert checkpoint["round"] == 2 and checkpoint["process_states"]["world_size"] == 2
        expected = reference_params(tmp_path / "reference", monkeypatch, *args[len(QUICK) :], config=config)
        assert float((checkpoint["params"] - expected).norm() / expected.norm()) <= 1e-6


def test_warned_job_checkpoints_requeues_and_resumes_to_the_uninterrupted_weights(
    cluster, tmp_path, job_env, monkeypatch
):
    rounds = 30
    runs = tmp_path / "runs"
    output = tmp_path / "job-%j.out"
    # multi_node.sbatch on the one node there is: the same script as on many
    job = cluster.sbatch(
        "multi_node.sbatch",
        [*CPU_JOB, "--nodes=1", f"--output={output}"],
        [*QUICK, "--trainer.rounds", str(rounds)],
        env={**job_env, "ROOT_DIR": str(runs)},
    )
    output = tmp_path / f"job-{job}.out"
    version = runs / f"lightfed-{job}" / "version_0"
    with cluster.diagnose(output):
        cluster.wait_for_file(version / "checkpoints" / "last.ckpt", job, timeout=300)
        # what --signal=USR1@120 sends before the time limit: SIGUSR1 to the job step's tasks (not the batch shell)
        cluster.cmd("scancel", "--signal=USR1", job)
        cluster.wait(job, timeout=600)
        info = cluster.job(job)
        _assert_completed(info)
        assert info["Restarts"] == "1", info
        log = output.read_text()  # --open-mode=append: both starts
        assert "(restarts: 0)" in log and "(restarts: 1)" in log
        stopped = re.search(r"stopped on request after round (\d+);.*requeueing SLURM job (\S+)", log)
        assert stopped and stopped.group(2) == job, log
        preempted = int(stopped.group(1))
        assert 1 <= preempted < rounds
        # one run folder; the second start resumed it: it logs the checkpointed round again (which hides the first
        # start's point of it, purge_step), then the rest; the folder holds every round once
        assert [p.name for p in version.parent.iterdir()] == ["version_0"]
        first, second = _event_files(version)
        assert _events(first) == list(range(1, preempted + 1))
        assert _events(second) == list(range(preempted, rounds + 1))
        assert _events(version) == list(range(1, rounds + 1))
        checkpoint = _checkpoint(version / "checkpoints" / "last.ckpt")
        assert checkpoint["round"] == rounds
        expected = reference_params(tmp_path / "reference", monkeypatch, "--trainer.rounds", str(rounds))
        assert (checkpoint["params"] - expected).abs().max() <= 1e-5


def test_sweep_array_runs_one_task_per_run_resumes_a_warned_task_and_collects(cluster, tmp_path, job_env):
    rounds = 15
    out = tmp_path / "sweep"
    compare_args = [
        "--configs",
        QUICKSTART,
        "--seeds",
        "0",
        "1",
        "--rounds",
        str(rounds),
        "--set",
        "trainer.client_eval_interval=0",
        "--out",
        str(out),
    ]
    env = {
        **job_env,
        "SBATCH_ARGS": f"--gpus-per-node=0 --cpus-per-task=1 --output={tmp_path}/%x-%A_%a.out",
        "COLLECT_ARGS": f"--output={tmp_path}/%x-%j.out",
    }
    submitted = cluster.cmd(str(SLURM_DIR / "submit_sweep.sh"), *compare_args, env=env, timeout=300)
    ids = re.search(r"array job (\d+): 2 runs .* collect job (\d+)", submitted)
    assert ids, submitted
    array, collect = ids.groups()
    with cluster.diagnose(tmp_path / "*.out"):
        run0 = out / "runs" / "quickstart__seed0" / "version_0"
        cluster.wait_for_file(run0 / "checkpoints" / "last.ckpt", f"{array}_0", timeout=300)
        cluster.cmd("scancel", "--signal=USR1", f"{array}_0")
        cluster.wait(array, timeout=600)
        cluster.wait(collect, timeout=300)
        task0, task1 = cluster.job(f"{array}_0"), cluster.job(f"{array}_1")
        for info in (task0, task1, cluster.job(collect)):
            _assert_completed(info)
        assert (task0["Restarts"], task1["Restarts"]) == ("1", "0")
        log0 = (tmp_path / f"lightfed-sweep-{array}_0.out").read_text()
        assert f"requeueing SLURM job {array}_0" in log0 and "requeue of" not in log0  # no failure line
        # the requeued task resumed its run (--ckpt_path auto): two starts of one run folder, every round once
        assert [p.name for p in run0.parent.iterdir()] == ["version_0"]
        assert len(_event_files(run0)) == 2
        assert _events(run0) == list(range(1, rounds + 1))
        assert _checkpoint(run0 / "checkpoints" / "last.ckpt")["round"] == rounds
        # the collect job found both runs finished
        results = json.loads((out / "results.json").read_text())
        assert [r["status"] for r in results["runs"]] == ["finished", "finished"]
        assert "| quickstart | 2/2 |" in (out / "table.md").read_text()  # nothing swept: no setting column


def test_two_node_job_survives_a_requeue_and_matches_one_node_with_two_processes(cluster, tmp_path, job_env):
    if len(cluster.nodes) < 2:
        pytest.skip(f"one node only: this host's name {socket.gethostname()} does not resolve")
    rounds, held = 5, 3
    config = "configs/digits/base.yaml configs/digits/scaffold.yaml"  # SCAFFOLD: per-process checkpoint files
    args = [*QUICK, "--trainer.rounds", str(rounds), "--trainer.clients_per_round", "4", "--trainer.local_epochs", "1"]
    marker = tmp_path / "held"
    hold = [{"class_path": "tests.slurm.hold.HoldUntilSignalled", "init_args": {"marker": str(marker), "round": held}}]
    env = {**job_env, "CONFIG": " ".join(str(REPO / c) for c in config.split()), "PYTHONPATH": str(REPO)}
    output = tmp_path / "job-%j.out"
    one_node = cluster.sbatch(
        "multi_node.sbatch",
        [*CPU_JOB, "--nodes=1", f"--output={output}"],
        args,
        env={**env, "ROOT_DIR": str(tmp_path / "one")},
    )
    two_nodes = cluster.sbatch(
        "multi_node.sbatch",
        ["--gpus-per-node=0", "--nodes=2", "--ntasks-per-node=1", "--cpus-per-task=1", f"--output={output}"],
        [*args, "--trainer.callbacks", json.dumps(hold)],
        env={**env, "ROOT_DIR": str(tmp_path / "two")},
    )
    version = tmp_path / "two" / f"lightfed-{two_nodes}" / "version_0"
    logs = [tmp_path / f"job-{job}.out" for job in (one_node, two_nodes)]
    with cluster.diagnose(*logs):
        cluster.wait_for_file(marker, two_nodes, timeout=300)
        cluster.cmd("scontrol", "requeue", two_nodes)  # SIGTERM to every task: round 3 ends, is checkpointed, stops
        cluster.wait(two_nodes, timeout=600)
        cluster.wait(one_node, timeout=600)
        _assert_completed(cluster.job(one_node))
        info = cluster.job(two_nodes)
        _assert_completed(info)
        assert info["Restarts"] == "1" and info["NodeList"] == ",".join(cluster.nodes), info
        log = logs[1].read_text()
        nodes = ",".join(cluster.nodes)
        assert f"(restarts: 0) on {nodes}:" in log and f"(restarts: 1) on {nodes}:" in log, log
        assert log.count("Starting with 2 processes") == 2, log
        for node in cluster.nodes:  # each start ran one task on each node
            slurmd_log = (cluster.root / "log" / f"slurmd-{node}.log").read_text()
            assert slurmd_log.count(f"launch task StepId={two_nodes}.0 ") == 2, slurmd_log
        # the first start stopped after the held round, the second resumed there (and logged it again)
        first, second = _event_files(version)
        assert _events(first) == list(range(1, held + 1))
        assert _events(second) == list(range(held, rounds + 1))
        assert _events(version) == list(range(1, rounds + 1))
        trainer = yaml.safe_load((version / "config.yaml").read_text())["trainer"]
        assert (trainer["num_nodes"], trainer["devices"]) == (2, 1), trainer  # from SLURM_NNODES, SLURM_NTASKS_PER_NODE
        checkpoint = _checkpoint(version / "checkpoints" / "last.ckpt")
        assert checkpoint["round"] == rounds
        saved = checkpoint["process_states"]
        assert saved["world_size"] == 2 and len(set(saved["sha256"])) == 2, saved
        files = sorted(p.name for p in (version / "checkpoints" / FOLDER / saved["folder"]).iterdir())
        assert files == ["process_0_of_2.pt", "process_1_of_2.pt"], files
        (reference,) = (tmp_path / "one" / f"lightfed-{one_node}").iterdir()
        assert torch.equal(checkpoint["params"], _checkpoint(reference / "checkpoints" / "last.ckpt")["params"])
