"""jsonargparse's parse errors as the one line ``lightfed fit`` and ``lightfed compare`` print."""

import importlib
import re
from argparse import ArgumentError


def _accepted_options(path: str) -> list[str]:
    """The options the class at ``path`` takes, as jsonargparse reads its signature; [] when it cannot say."""
    from jsonargparse import ArgumentParser

    module, _, name = path.rpartition(".")
    try:
        parser = ArgumentParser(exit_on_error=False)
        parser.add_class_arguments(getattr(importlib.import_module(module), name))
        return list(dict.fromkeys(key.split(".")[0] for key in parser.get_defaults().keys()))
    except Exception:  # noqa: BLE001 - only a hint: the line stays right without it
        return []


def parse_error_line(error: ArgumentError, command: str = "lightfed fit") -> str:
    """jsonargparse's message in one line; for a class path that does not import, only the reason; for an option
    a class does not take, the option, the options it takes and the command that describes them."""
    message = " ".join(str(error).split())
    if re.search(r"does not accept option 'data\.(class_path|init_args)", message):
        return (
            "data is lightfed's FederatedDataModule: name your LightningDataModule or dataset under data.dataset "
            "(data: {dataset: {class_path: my.DataModule}, partitioner: ...})"
        )
    neither = re.search(
        r"Parser key \"data\.dataset\".*subclass of DatasetSource.*subclass of LightningDataModule.*"
        r"Given value: (\S+)",
        message,
    )
    if neither:
        return f"data.dataset: {neither.group(1)} is neither a lightfed DatasetSource nor a LightningDataModule"
    unknown_class = re.search(r"^(Parser key \S+ )?.*Problem with given class_path ('[^']+'): (.*?)( - |$)", message)
    keys = re.findall(r'Parser key "([^"]+)"', message)
    argument = re.search(  # a value of the wrong type for one of the class's options, as a union or a plain type
        r"Parser key \"\w+\": - Expected .*?Expected a <class '(\w+)'>.*?Given value: (.*?)\. Got value", message
    ) or re.search(r"Parser key \"\w+\": Expected a <class '(\w+)'>\. Got value: (.*?)(?: - |$)", message)
    if unknown_class and argument:  # the class imports; one of its arguments does not parse
        expected = f"a {argument[1]}"
        if argument[2].lower().lstrip("+-") in ("nan", "inf", "infinity"):
            expected = "a finite number"
        return f"{'.'.join(keys)}: expected {expected}, got {argument[2]!r}"
    not_accepted = re.search(
        r"Option '([^']+)' is not accepted(?:\. Got value: Namespace\(class_path='([^']+)')?", message
    ) or re.search(r"unrecognized arguments: --(\w+)()", message)  # an option under one it does not take
    if unknown_class and not_accepted and keys:  # the class imports; it takes no option of that name
        option, inner = not_accepted[1], not_accepted[2]  # inner: a class given as a callable's class_path
        path = inner or unknown_class.group(2).strip("'")
        accepted = _accepted_options(path)[1 if inner else 0 :]  # a callable's class gets its first argument given
        takes = f"it takes {', '.join(accepted)}" if accepted else "it takes no options"
        line = f"{'.'.join(keys)}.{option}: {path} has no option {option!r}; {takes}"
        return line if inner else f"{line} ({command} --{keys[0]}.help {path} describes them)"
    if unknown_class:
        key, path, reason = unknown_class.group(1) or "", unknown_class.group(2), unknown_class.group(3)
        return f"{key}cannot import {path}: {reason}"
    return message
