"""A sweep's pool of worker processes: Ctrl-C stops the runs in flight after their round and starts no other."""

import os
import queue
import signal
import subprocess
import threading
import time

import pytest

from tests.conftest import LIGHTFED, QUICKSTART


@pytest.mark.slow
def test_ctrl_c_on_a_pool_of_two_starts_none_of_the_queued_runs(tmp_path):
    """Three runs on two workers, Ctrl-C (to the whole process group, as a terminal sends it) once two have logged a
    round: the third never starts, the two stop early, and the sweep ends with status 130."""
    command = [
        *LIGHTFED,
        "compare",
        "--configs",
        str(QUICKSTART),
        "--seeds",
        "0",
        "1",
        "2",
        "--workers",
        "2",
        "--rounds",
        "300",  # far more than the two runs can train between their start and the Ctrl-C
        "--set",
        "trainer.client_eval_interval=0",
        "--out",
        str(tmp_path / "cmp"),
    ]
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    sweep = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environment, start_new_session=True
    )
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in sweep.stdout], daemon=True)
    reader.start()
    printed = []
    runs = tmp_path / "cmp" / "runs"
    try:
        for _ in range(6000):  # a run prints nothing before it ends: its metrics file says it has started
            if len(list(runs.glob("*/version_0/metrics.jsonl"))) >= 2:
                break
            time.sleep(0.1)
        os.killpg(sweep.pid, signal.SIGINT)
        assert sweep.wait(timeout=600) == 130
    finally:
        if sweep.poll() is None:
            os.killpg(sweep.pid, signal.SIGKILL)
            sweep.wait(timeout=60)
    reader.join(timeout=60)
    while not lines.empty():
        printed.append(lines.get(timeout=1))
    output = "".join(printed)
    assert len(list(runs.glob("*/version_0"))) == 2 and "[3/3]" not in output, output
    assert "val_acc=" not in output and "compare: stopped by Ctrl-C" in output, output
