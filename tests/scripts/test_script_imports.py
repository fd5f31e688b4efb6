"""The scripts share code through lightfed, not through each other: none of them edits ``sys.path``."""

import ast
from pathlib import Path

SCRIPTS = sorted((Path(__file__).resolve().parents[2] / "scripts").rglob("*.py"))


def _edits_sys_path(source: str) -> bool:
    return any(
        isinstance(node, ast.Attribute)
        and node.attr == "path"
        and isinstance(node.value, ast.Name)
        and node.value.id == "sys"
        for node in ast.walk(ast.parse(source))
    )


def test_no_script_edits_sys_path():
    assert SCRIPTS
    assert [script.name for script in SCRIPTS if _edits_sys_path(script.read_text())] == []


def test_the_check_sees_a_sys_path_edit():
    assert _edits_sys_path("import sys\nsys.path.insert(0, 'x')\n")
    assert not _edits_sys_path("import sys\nprint(sys.argv)\n")
