"""Every public class of lightfed's public packages shows how it is used: an ``Examples:`` section in its docstring
with doctest lines (``>>>``) that run and print what the docstring says."""

import doctest
import importlib
import inspect

import pytest

# the packages a user configures or subclasses, each with its ``__all__``
PUBLIC_PACKAGES = (
    "lightfed",
    "lightfed.strategies",
    "lightfed.local",
    "lightfed.personalization",
    "lightfed.transforms",
    "lightfed.callbacks",
    "lightfed.privacy",
    "lightfed.audit",
    "lightfed.attacks",
    "lightfed.optim",
    "lightfed.data",
    "lightfed.models",
)


def public_classes(package: str) -> dict[str, type]:
    """The classes a package exports (its ``__all__``), by name."""
    module = importlib.import_module(package)
    return {name: value for name in module.__all__ if inspect.isclass(value := getattr(module, name))}


def classes_without_examples(package: str) -> list[str]:
    """The names of a package's public classes whose own docstring has no ``Examples:`` section with ``>>>``."""
    missing = []
    for name, cls in public_classes(package).items():
        doc = cls.__dict__.get("__doc__") or ""
        if "Examples:" not in doc or ">>>" not in doc.split("Examples:", 1)[1]:
            missing.append(name)
    return missing


def failed_examples(cls: type) -> str:
    """The doctest report of a class's own docstring examples; empty when they all pass."""
    finder = doctest.DocTestFinder(recurse=False)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    module = inspect.getmodule(cls)
    report: list[str] = []
    for test in finder.find(cls, cls.__qualname__, module=module, globs=dict(vars(module) if module else {})):
        runner.run(test, out=report.append)
    return "".join(report)


@pytest.mark.parametrize("package", PUBLIC_PACKAGES)
def test_every_public_class_has_examples(package):
    assert classes_without_examples(package) == []


@pytest.mark.parametrize("package", PUBLIC_PACKAGES)
def test_the_examples_run_and_print_what_they_say(package):
    failures = {name: report for name, cls in public_classes(package).items() if (report := failed_examples(cls))}
    assert failures == {}


def test_a_wrong_example_is_reported():
    class Wrong:
        """Examples:
        >>> 1 + 1
        3
        """

    assert "Expected:\n    3\nGot:\n    2" in failed_examples(Wrong)
