"""The user's modules: only those a command's config names are importable from the working folder and beside the
config files, only while the command runs, and after the installed packages."""

import importlib
import importlib.util
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from lightfed.user_modules import installed, user_modules
from tests.conftest import LIGHTFED


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A folder with a config naming ``named_beside_config.Net``, that module, a module it does not name and one in
    the working folder named on the command line; each module adds its name to ``imported.txt`` when it runs."""
    folder = tmp_path / "project"
    folder.mkdir()
    for module in ("named_beside_config", "stray_beside_config", "json"):
        (folder / f"{module}.py").write_text(
            f"import pathlib\nwith open(pathlib.Path(__file__).parent / 'imported.txt', 'a') as f:\n"
            f"    f.write('{module}\\n')\nclass Net: pass\n"
        )
    (tmp_path / "named_in_cwd.py").write_text("class Net: pass\n")
    (folder / "config.yaml").write_text("model: {class_path: named_beside_config.Net}\ndata: {dataset: json.Net}\n")
    monkeypatch.chdir(tmp_path)
    yield folder
    for module in ("named_beside_config", "stray_beside_config", "named_in_cwd"):
        sys.modules.pop(module, None)


def imported(folder: Path) -> list[str]:
    marker = folder / "imported.txt"
    return marker.read_text().split() if marker.exists() else []


def test_only_the_named_modules_are_importable_and_only_while_the_command_runs(project):
    argv = ["fit", "--config", str(project / "config.yaml"), "--trainer.callbacks", "named_in_cwd.Net"]
    with user_modules(argv):
        assert importlib.import_module("named_beside_config").Net
        assert importlib.import_module("named_in_cwd").Net
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module("stray_beside_config")
        assert importlib.util.find_spec("json").origin != str(project / "json.py")  # the standard library's
    assert imported(project) == ["named_beside_config"] and installed() is None
    del sys.modules["named_beside_config"]
    assert importlib.util.find_spec("named_beside_config") is None


def test_a_pickled_finder_installs_itself_where_it_is_unpickled(project):
    """What a worker process started afresh does before it unpickles the user's dataset."""
    with user_modules(["fit", "--config", str(project / "config.yaml")]) as finder:
        payload = pickle.dumps((finder, importlib.import_module("named_beside_config").Net))
    code = "import pickle, sys; pickle.loads(sys.stdin.buffer.read()); print('unpickled')"
    environment = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run(
        [sys.executable, "-c", code], input=payload, capture_output=True, cwd="/", env=environment, timeout=120
    )
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().split() == ["unpickled"]


@pytest.mark.slow
def test_a_refused_command_runs_no_module_beside_its_config(tmp_path):
    """torch imports ``tabulate`` when the process exits, if it can: a tabulate.py beside the config must not run."""
    run = tmp_path / "runs" / "x"
    run.mkdir(parents=True)
    (run / "tabulate.py").write_text("open(__file__ + '.ran', 'w').close()\n")
    (run / "config.yaml").write_text("trainer: {accelerator: cpu}\n")
    environment = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}  # this checkout's lightfed
    command = [*LIGHTFED, "test", "--config", "runs/x/config.yaml", "--ckpt_path", "runs/x/missing.ckpt"]
    done = subprocess.run(command, cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=600)
    assert done.returncode == 2 and done.stderr.startswith("lightfed: error:"), done.stderr
    assert not (run / "tabulate.py.ran").exists()
