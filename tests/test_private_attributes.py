"""lightfed uses no ``_``-prefixed name of another library outside ``lightfed/adapters.py``.

A ``_name`` is lightfed's own when lightfed's source defines it (a function, class or variable of that name, or an
attribute it assigns on ``self`` or ``cls``); any other ``x._name``, ``getattr(x, "_name")``, ``from m import _name`` or
``import m._private`` of a module outside lightfed belongs to another library.
"""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "lightfed"
ADAPTERS = PACKAGE / "adapters.py"
DOCUMENTED = {"_exit", "_asdict", "_replace", "_fields", "_field_defaults", "_make"}  # os._exit, namedtuple's methods
ATTRIBUTE_FUNCTIONS = {"getattr", "setattr", "hasattr", "delattr"}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__")) and name not in DOCUMENTED


def _ours(module: str) -> bool:
    return module.split(".")[0] == "lightfed"


def own_names(trees: list[ast.Module]) -> set[str]:
    """The names lightfed's source defines."""
    names = set()
    for node in (node for tree in trees for node in ast.walk(tree)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                names.add(node.attr)
    return names


def private_uses(tree: ast.Module, own: set[str]) -> list[tuple[int, str]]:
    """(line, code) of each use of another library's ``_``-prefixed name in ``tree``."""
    uses = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr) and node.attr not in own:
            uses.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ATTRIBUTE_FUNCTIONS:
            name = node.args[1] if len(node.args) > 1 else None
            if isinstance(name, ast.Constant) and isinstance(name.value, str) and _private(name.value):
                if name.value not in own:
                    uses.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Import):
            parts = [part for alias in node.names if not _ours(alias.name) for part in alias.name.split(".")]
            if any(map(_private, parts)):
                uses.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.ImportFrom) and not node.level and not _ours(node.module or ""):
            parts = [*(node.module or "").split("."), *(alias.name for alias in node.names)]
            if any(map(_private, parts)):
                uses.append((node.lineno, ast.unparse(node)))
    return uses


def test_the_scan_finds_another_librarys_private_names_and_only_those():
    source = """
import os, atexit
import torch._dynamo
from lightning.fabric.wrappers import _FabricOptimizer
from lightfed.core import _helper
from ._sibling import thing

class Mine:
    def __init__(self):
        self._own = 1

    def use(self, other, module):
        other._own, os._exit, self.__class__, _helper()
        atexit._run_exitfuncs()
        getattr(module, "_trainer"), getattr(other, "_own")
        return module._trainer
"""
    tree = ast.parse(source)
    assert [code for _, code in private_uses(tree, own_names([tree]))] == [
        "import torch._dynamo",
        "from lightning.fabric.wrappers import _FabricOptimizer",
        "module._trainer",
        "atexit._run_exitfuncs",
        "getattr(module, '_trainer')",
    ]


def test_lightfed_uses_no_private_name_of_another_library_outside_the_adapters():
    trees = {path: ast.parse(path.read_text(), str(path)) for path in sorted(PACKAGE.rglob("*.py"))}
    own = own_names(list(trees.values()))
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {code}"
        for path, tree in trees.items()
        if path != ADAPTERS
        for line, code in sorted(private_uses(tree, own))
    ]
    assert not found, "move these into lightfed/adapters.py, each with a test in tests/test_adapters.py:\n" + "\n".join(
        found
    )
