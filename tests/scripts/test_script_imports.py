"""The scripts share code through lightfed and ``scripts/harness.py``, never through each other: the one edit of
``sys.path`` a script makes puts ``scripts/`` first, to import the harness, and the harness imports no torch."""

import ast
import subprocess
import sys

from tests.scripts.script_modules import SCRIPTS

SOURCES = sorted(SCRIPTS.rglob("*.py"))
HARNESS_LINE = "sys.path.insert(0, str(Path(__file__).resolve().parents[1]))"


def _sys_path_edits(source: str) -> list[str]:
    """The source of each statement that touches ``sys.path``."""
    tree = ast.parse(source)
    return [
        ast.get_source_segment(source, statement)
        for statement in tree.body
        if any(
            isinstance(node, ast.Attribute)
            and node.attr == "path"
            and isinstance(node.value, ast.Name)
            and node.value.id == "sys"
            for node in ast.walk(statement)
        )
    ]


def _imported(source: str) -> set[str]:
    """The top-level names of the modules ``source`` imports."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def test_a_script_edits_sys_path_only_to_import_the_harness():
    assert len(SOURCES) > 10
    for script in SOURCES:
        source = script.read_text()
        edits = _sys_path_edits(source)
        assert edits in ([], [HARNESS_LINE]), script
        assert not edits or "harness" in _imported(source), script


def test_no_script_imports_another():
    others = {script.stem for script in SOURCES} - {"harness"}
    assert {script.name: _imported(script.read_text()) & others for script in SOURCES} == {
        script.name: set() for script in SOURCES
    }


def test_the_checks_see_a_sys_path_edit_and_an_import():
    assert _sys_path_edits("import sys\nsys.path.insert(0, 'x')\n") == ["sys.path.insert(0, 'x')"]
    assert _sys_path_edits("import sys\nprint(sys.argv)\n") == []
    assert _imported("import a.b\nfrom c import d\nfrom . import e\n") == {"a", "c"}


def test_the_harness_imports_no_torch():
    code = "import sys, harness; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], cwd=SCRIPTS, timeout=60).returncode == 0
