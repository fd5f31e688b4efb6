"""lightfed's modules import each other without a cycle. Every import in a module's source counts, those under
``if TYPE_CHECKING:`` and inside functions too.

Package ``__init__`` re-exports are seen through: a name imported from a package counts as an import of the module
that defines it, and importing a submodule does not count as importing its parent packages' ``__init__``. Python
runs those first whatever is imported, and ``lightfed/__init__`` re-exports the trainer, so counting them would put
every module on a cycle that only the re-exports make.
"""

import ast
from pathlib import Path

import lightfed

ROOT = Path(lightfed.__file__).parent

# Imports that close cycles owned by other work; each goes when its cycle does.
KNOWN_CYCLE_EDGES = {}


def module_files(root: Path) -> dict[str, Path]:
    files = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return files


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Each lightfed module and the lightfed modules its source imports."""
    files = module_files(root)

    def source(module: str, name: str) -> str:
        """The module ``from module import name`` takes ``name`` from, through package re-exports."""
        if f"{module}.{name}" in files:
            return f"{module}.{name}"
        if module in files and files[module].name == "__init__.py":
            for node in ast.parse(files[module].read_text()).body:
                if isinstance(node, ast.ImportFrom):
                    for alias in node.names:
                        if (alias.asname or alias.name) == name:
                            return source(absolute(module, node), alias.name)
        return module

    def absolute(module: str, node: ast.ImportFrom) -> str:
        if not node.level:
            return node.module
        package = module if files[module].name == "__init__.py" else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        return f"{package}.{node.module}" if node.module else package

    graph = {}
    for module, path in files.items():
        imported = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                imported.update(source(absolute(module, node), alias.name) for alias in node.names)
        graph[module] = (imported & files.keys()) - {module}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle (its first module repeated at the end), or None."""
    done, path = set(), []

    def visit(module: str) -> list[str] | None:
        path.append(module)
        for imported in sorted(graph[module]):
            if imported in path:
                return path[path.index(imported) :] + [imported]
            if imported not in done:
                cycle = visit(imported)
                if cycle:
                    return cycle
        done.add(path.pop())
        return None

    for module in sorted(graph):
        if module not in done:
            cycle = visit(module)
            if cycle:
                return cycle
    return None


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for imported in graph[todo.pop()] - seen:
            seen.add(imported)
            todo.append(imported)
    return seen


def test_lightfed_modules_import_each_other_without_a_cycle():
    graph = import_graph()
    for module, imported in KNOWN_CYCLE_EDGES:
        assert imported in graph[module], f"{module} no longer imports {imported}: remove it from KNOWN_CYCLE_EDGES"
        graph[module] = graph[module] - {imported}
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_local_rules_and_privacy_mechanisms_never_reach_the_client_trainer():
    graph = import_graph()
    users = [m for m in graph if m.startswith(("lightfed.local", "lightfed.privacy", "lightfed.ecado"))]
    users += ["lightfed.core.local_context", "lightfed.core.local_session"]
    for module in users:
        assert "lightfed.run.client" not in reachable(graph, module), module


def test_the_graph_sees_imports_under_type_checking_in_functions_and_through_re_exports(tmp_path):
    package = tmp_path / "lightfed"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("from lightfed.sub.b import B as Renamed\n")
    (package / "sub" / "b.py").write_text("def f():\n    from lightfed.a import A\n")
    (package / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .sub import Renamed\n")
    graph = import_graph(package)
    assert graph == {
        "lightfed": set(),
        "lightfed.sub": {"lightfed.sub.b"},
        "lightfed.sub.b": {"lightfed.a"},
        "lightfed.a": {"lightfed.sub.b"},
    }
    assert find_cycle(graph) == ["lightfed.a", "lightfed.sub.b", "lightfed.a"]
