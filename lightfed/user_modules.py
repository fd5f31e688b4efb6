"""The user's own modules that a config names by import path (``class_path: mine.Net``), found in the working folder
or beside a config file without putting those folders on ``sys.path``: nothing else there becomes importable, and an
installed module of the same name wins; and whether a function a config names is the user's own code."""

import functools
import importlib.abc
import importlib.machinery
import inspect
import os
import re
import site
import sys
import sysconfig
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

from lightfed.errors import ConfigError

_IMPORT_PATH = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")


@dataclass(frozen=True)
class UserModules(importlib.abc.MetaPathFinder):
    """Finds the top-level modules ``names`` in ``folders`` (in that order), and no other module. Unpickling one
    installs it (``install``), so that a worker process started afresh can unpickle the user's classes."""

    names: frozenset[str]
    folders: tuple[str, ...]

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if path is not None or fullname not in self.names:  # a submodule is found through its package's __path__
            return None
        return importlib.machinery.PathFinder.find_spec(fullname, list(self.folders))

    def __reduce__(self) -> tuple[Any, tuple[frozenset[str], tuple[str, ...]]]:
        return install, (self.names, self.folders)


def install(names: frozenset[str], folders: tuple[str, ...]) -> UserModules:
    """The finder of ``names`` in ``folders``, at the end of ``sys.meta_path`` (after the installed packages)."""
    finder = UserModules(names, folders)
    if finder not in sys.meta_path:
        sys.meta_path.append(finder)
    return finder


def installed() -> UserModules | None:
    """The finder this process resolves the user's modules with, if any."""
    return next((finder for finder in sys.meta_path if isinstance(finder, UserModules)), None)


@contextmanager
def user_modules(argv: Sequence[str]) -> Iterator[UserModules]:
    """While inside: the modules the command line ``argv`` and its ``--config`` files name are importable from the
    working folder and the config files' folders."""
    configs = [value for option, value in zip(argv, argv[1:], strict=False) if option in ("-c", "--config")]
    configs += [arg.split("=", 1)[1] for arg in argv if arg.startswith("--config=")]
    named = set()
    for config in configs:
        named |= _named_modules(_read_yaml(config))
    for arg in (arg for arg in argv if arg not in configs):
        if not arg.startswith("-") or "=" in arg:
            named |= _named_modules(_parse_yaml(arg.split("=", 1)[1] if arg.startswith("-") else arg))
    folders = dict.fromkeys([os.getcwd(), *(os.path.dirname(os.path.abspath(config)) for config in configs)])
    already = installed()
    finder = install(frozenset(named), tuple(folders))
    try:
        yield finder
    finally:
        if finder != already:
            sys.meta_path.remove(finder)


def _named_modules(value: object) -> set[str]:
    """The top-level module of each import path (``a.b.C``) among the strings in ``value``."""
    if isinstance(value, str):
        return {value.split(".", 1)[0]} if _IMPORT_PATH.fullmatch(value) else set()
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else []
    return set().union(*map(_named_modules, items))


def _read_yaml(path: str) -> object:
    """The YAML document of a file; None where it cannot be read (the config's parser then says why)."""
    try:
        with open(path, encoding="utf-8") as file:
            return yaml.safe_load(file)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None


def _parse_yaml(text: str) -> object:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


LIBRARY_FOLDERS = {
    Path(folder).resolve()
    for folder in [*(sysconfig.get_paths()[kind] for kind in ("stdlib", "platstdlib", "purelib", "platlib")),
                   *site.getsitepackages(), site.getusersitepackages()]
}  # fmt: skip


def library_code(transform: Any) -> str | None:
    """The name of ``transform`` (a function, a class, a callable object by its class; a ``functools.partial`` or a
    method by its function) where it is not lightfed's or the user's own code but the standard library's, a built-in
    or an installed package's; None where it is lightfed's or defined in a file of the user's."""
    while isinstance(transform, functools.partial) or inspect.ismethod(transform):
        transform = transform.func if isinstance(transform, functools.partial) else transform.__func__
    defined = transform if inspect.isroutine(transform) or inspect.isclass(transform) else type(transform)
    module = getattr(defined, "__module__", None) or "builtins"
    name = f"{module}.{getattr(defined, '__qualname__', '?')}"
    if module.split(".")[0] == "lightfed":
        return None
    file = getattr(sys.modules.get(module), "__file__", None)
    if file is None or any(Path(file).resolve().is_relative_to(folder) for folder in LIBRARY_FOLDERS):
        return name
    return None


def check_own_code(option: str, function: Any, runs_on: str, instead: str) -> None:
    """Raises ``ConfigError`` where ``function``, which ``option`` names, is not lightfed's or the user's own code
    (``library_code``): it would run on ``runs_on``; the line says to name ``instead``."""
    library = library_code(function)
    if library is not None:
        raise ConfigError(
            f"{option}: {library} is not lightfed's or your own code but the standard library's or an installed "
            f"package's, which would run on {runs_on}: name {instead}"
        )
