"""lightfed's folders are layers and every import runs downward (or within a layer): what data and models are
written with at the bottom, then the core that algorithms use, the algorithms, the run, and the command line on top.
See docs/guides/architecture.md."""

from tests.test_import_graph import import_graph

LAYERS = [
    (
        "foundation",
        {"errors", "user_modules", "adapters", "distributions", "schedules", "streams", "data", "models", "optim"},
    ),
    ("core", {"core", "callbacks", "heterogeneity"}),
    ("algorithms", {"strategies", "local", "privacy", "attacks", "personalization", "ecado", "transforms"}),
    ("run", {"run", "asynchronous", "trainer", "launcher"}),
    ("top", {"cli", "parse_errors", "subcommands", "experiments", "audit", "__main__", ""}),
]


def layer(module: str) -> int:
    """The index in ``LAYERS`` of a lightfed module (``lightfed.run.engine`` -> the run's), by its first part."""
    part = module.removeprefix("lightfed").removeprefix(".").split(".")[0]
    for index, (_, parts) in enumerate(LAYERS):
        if part in parts:
            return index
    raise AssertionError(f"{module} is in no layer: add lightfed.{part} to LAYERS")


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Each import of a module from a higher layer, as ``importer -> imported``."""
    return sorted(
        f"{module} ({LAYERS[layer(module)][0]}) -> {imported} ({LAYERS[layer(imported)][0]})"
        for module, imported_modules in graph.items()
        for imported in imported_modules
        if layer(imported) > layer(module)
    )


def test_every_import_runs_down_the_layers():
    assert upward_imports(import_graph()) == []


def test_an_upward_import_is_found():
    graph = {
        "lightfed.core.messages": {"lightfed.local.correction"},
        "lightfed.local.correction": {"lightfed.core.flat"},
    }
    assert upward_imports(graph) == ["lightfed.core.messages (core) -> lightfed.local.correction (algorithms)"]
