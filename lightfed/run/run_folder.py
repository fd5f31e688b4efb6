"""A run's folder, ``<root_dir>/<name>/version_<n>``: claimed atomically, so runs started at once never share one."""

import os
import re
from pathlib import Path

import yaml

from lightfed.core.no_follow import open_new
from lightfed.errors import ConfigError

CONFIG = "config.yaml"

VERSION = "version_"


def version_folder(experiment: Path, version: int) -> Path:
    return experiment / f"{VERSION}{version}"


def claim_run_folder(experiment: Path, version: int | None = None) -> Path:
    """Creates and returns a new run folder under ``experiment``: ``version_<version>``, or the first free version
    after the highest one there. Creating the folder is the claim (``mkdir`` fails for all but one of the runs
    that try the same name at once), so each run gets a folder of its own."""
    try:
        experiment.mkdir(parents=True, exist_ok=True)
        if version is not None:
            folder = version_folder(experiment, version)
            if _claim(folder):
                return folder
            raise ConfigError(
                f"the run folder {folder} exists already: resume that run with --ckpt_path last, or start a new run "
                "with --trainer.version null"
            )
        numbers = [
            int(match[1]) for entry in os.listdir(experiment) if (match := re.fullmatch(rf"{VERSION}(\d+)", entry))
        ]
        number = max(numbers, default=-1) + 1
        while not _claim(version_folder(experiment, number)):
            number += 1
        return version_folder(experiment, number)
    except OSError as error:  # a file in the way, no permission, a file system that makes no folders (/proc)
        raise ConfigError(
            f"cannot make the run folder under {experiment}: {error.strerror}; change trainer.root_dir"
        ) from None


def _claim(folder: Path) -> bool:
    """Whether this call made ``folder`` (False: it exists already)."""
    try:
        folder.mkdir()
    except FileExistsError:
        return False
    return True


def write_run_config(folder: Path, run_config: str) -> None:
    """Writes the run's resolved config as ``<folder>/config.yaml`` (atomically), naming ``folder``'s version in
    ``trainer.version``, so that ``--ckpt_path last`` with this config means this run."""
    config = yaml.safe_load(run_config)
    match = re.fullmatch(rf"{VERSION}(\d+)", folder.name)
    if match and isinstance(config.get("trainer"), dict):
        config["trainer"]["version"] = int(match[1])
    tmp = folder / (CONFIG + ".tmp")
    with open_new(tmp, "w") as file:  # a link planted as the temporary file is removed, not written through
        file.write(yaml.safe_dump(config, sort_keys=False))
    os.replace(tmp, folder / CONFIG)
