"""A script of ``scripts/`` as a module of the tests."""

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"


def load(path: str) -> ModuleType:
    """``scripts/<path>`` as the module ``<name>_script`` (registered, so that its dataclasses and pickling work)."""
    name = f"{Path(path).stem}_script"
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
