"""The reference page of the ``trainer:`` keys is what the ``lightfed fit`` parser says of them: every key with its type,
default and the first sentence of its help, grouped by the settings each key fills (``trainer_settings``).

The page is written by this file: ``python -m tests.test_trainer_keys`` rewrites ``docs/reference/trainer-keys.md``."""

import ast
import functools
import inspect
import re
import types
import typing
from pathlib import Path

from lightfed.run import settings
from lightfed.run.settings import trainer_settings
from lightfed.subcommands import build_parser

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "reference" / "trainer-keys.md"
RUN_KEYS = "The run"  # the keys that fill no settings group: the trainer takes them as they are

INTRODUCTION = """\
# `trainer:` keys

The keys of a config's `trainer:` section, for `lightfed fit`, `validate` and `test`. A key set on the command line
reads `--trainer.<key> <value>`. The table shows the first sentence of each key's help. `lightfed fit --help` prints
all of it. The trainer's seed is not a `trainer:` key: `seed_everything` sets it.

The keys are grouped by the settings they fill (`lightfed.run.settings`). Each group is checked when it is built. A
bad value stops the run before it starts, with a line that names the key.

<!-- Written by `python -m tests.test_trainer_keys` from the parser of `lightfed fit`; do not edit by hand. -->
"""


def type_name(hint: typing.Any) -> str:
    """A type as a config's reader reads it: ``int | str | None``, ``list[Callback]``, ``"warn"``."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_name(arg) for arg in args)
    if origin is typing.Literal:
        return " | ".join(f'"{arg}"' if isinstance(arg, str) else str(arg) for arg in args)
    if origin is not None:
        return f"{origin.__name__}[{', '.join(type_name(arg) for arg in args)}]"
    return "None" if hint is type(None) else hint.__name__


def default_value(value: typing.Any) -> str:
    """A default as YAML writes it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def first_sentence(help_text: str) -> str:
    """The help's first sentence, on one line."""
    text = " ".join(help_text.split())
    end = re.search(r"(?<!e\.g)(?<!i\.e)\.\s+(?=[A-Z(`\"])", text)
    return text if end is None else text[: end.start() + 1]


def settings_groups() -> dict[str, str]:
    """Each key's group, the settings class it fills, read from what ``trainer_settings`` returns."""
    tree = ast.parse(inspect.getsource(trainer_settings))
    returned = next(node.value for node in ast.walk(tree) if isinstance(node, ast.Return))
    assert isinstance(returned, ast.Dict)
    groups = {}
    for value in returned.values:
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
            groups.update({arg.id: value.func.id for arg in value.args if isinstance(arg, ast.Name)})
    return groups


@functools.cache
def trainer_keys() -> tuple[tuple[str, str, str, str, str], ...]:
    """(group, key, type, default, help) of every ``trainer:`` key, in the parser's order."""
    _, parsers = build_parser()
    groups = settings_groups()
    keys = []
    for action in parsers["fit"]._actions:  # jsonargparse's own list of the options it parses
        key = action.dest.removeprefix("trainer.")
        if key == action.dest or "." in key:  # not a trainer key, or a class's ``.help`` option
            continue
        hint = action._typehint  # the annotation jsonargparse parses the value as
        group = groups.get(key, RUN_KEYS)
        keys.append((group, key, type_name(hint), default_value(action.default), first_sentence(action.help or "")))
    return tuple(keys)


def group_title(group: str) -> str:
    """A group's heading: its settings class and the first sentence of its docstring."""
    if group == RUN_KEYS:
        return RUN_KEYS
    summary = first_sentence(getattr(settings, group).__doc__).split(";")[0].rstrip(".")
    return f"`{group}`: {summary[0].lower()}{summary[1:]}"


def trainer_keys_page() -> str:
    """The page: the introduction, then a table of keys a group: the run's own keys first, then the settings groups
    in the order of their first key."""
    keys = trainer_keys()
    order = list(dict.fromkeys([RUN_KEYS, *(group for group, *_ in keys)]))
    sections = [INTRODUCTION]
    for group in order:
        rows = [
            f"| `{key}` | `{kind}` | `{default}` | {help_text.replace('|', chr(92) + '|')} |"
            for key_group, key, kind, default, help_text in keys
            if key_group == group
        ]
        table = ["| key | type | default | what it sets |", "|---|---|---|---|", *rows]
        sections.append(f"## {group_title(group)}\n\n" + "\n".join(table) + "\n")
    return "\n".join(sections)


def test_the_page_lists_every_trainer_key_as_the_parser_does():
    assert PAGE.read_text() == trainer_keys_page(), "the trainer: keys changed: run python -m tests.test_trainer_keys"


def test_every_key_of_trainer_settings_is_on_the_page():
    keys = {key for _, key, *_ in trainer_keys()}
    assert keys == set(inspect.signature(trainer_settings).parameters) - {"seed"}


def test_every_key_has_a_type_a_default_and_a_help():
    assert [key for _, key, kind, default, help_text in trainer_keys() if not (kind and default and help_text)] == []


if __name__ == "__main__":
    PAGE.write_text(trainer_keys_page())
    print(f"wrote {PAGE.relative_to(ROOT)}")
