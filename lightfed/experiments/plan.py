"""A sweep's runs: configs x settings x seeds, each a ``lightfed fit`` command line with a deterministic name."""

import hashlib
import re
from argparse import ArgumentError
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from lightfed.experiments.sweep_specs import Setting, SpecError
from lightfed.parse_errors import parse_error_line
from lightfed.user_modules import user_modules


def short_key(key: str) -> str:
    return key.replace(".init_args.", ".")


def setting_label(setting: Setting) -> str:
    """``strategy.server_lr=0.5 model.lr=0.01``, or ``defaults`` for the config as it is."""
    return " ".join(f"{short_key(k)}={v}" for k, v in setting.items()) or "defaults"


def run_name(stem: str, setting: Setting, seed: int) -> str:
    """Deterministic folder name of one run: config stem, setting and seed (long settings are hashed)."""
    label = "__".join(f"{short_key(k)}={v}" for k, v in setting.items())
    label = re.sub(r"[^\w.=+-]", "_", label)
    if len(label) > 100:
        label = f"{label[:80]}-{hashlib.sha1(label.encode()).hexdigest()[:10]}"
    return "__".join(part for part in (stem, label, f"seed{seed}") if part)


@dataclass
class Run:
    config: str  # absolute path of the config file
    stem: str
    setting: Setting
    seed: int
    name: str
    argv: list[str]  # lightfed's arguments, "fit" first

    @property
    def group(self) -> tuple[str, str]:
        return self.stem, setting_label(self.setting)


def run_argv(
    config: str,
    fixed: Setting,
    setting: Setting,
    seed: int,
    rounds: int | None,
    runs_dir: str,
    name: str,
    base: Sequence[str] = (),
) -> list[str]:
    """The ``lightfed`` arguments of one run: ``base``'s files and then ``config``, the overrides, the seed and where
    the run writes."""
    argv = ["fit", *(arg for file in [*base, config] for arg in ("--config", file)), "--trainer.progress_bar", "false"]
    for key, value in [*fixed.items(), *setting.items()]:
        argv += [f"--{key}", value]
    if rounds is not None:
        argv += ["--trainer.rounds", str(rounds)]
    return argv + ["--seed_everything", str(seed), "--trainer.root_dir", runs_dir, "--trainer.name", name]


def config_names(configs: list[str]) -> list[str]:
    """File stems, with the folder in front where two stems are equal (digits/fedavg.yaml -> digits-fedavg)."""
    stems = [Path(c).stem for c in configs]
    names = [
        f"{Path(c).parent.name}-{stem}" if stems.count(stem) > 1 else stem
        for c, stem in zip(configs, stems, strict=True)
    ]
    for name in names:
        if names.count(name) > 1:
            raise SpecError(
                f"two configs are named {name!r}; run names come from the folder and file name, so rename one"
            )
    return names


def scoped(setting: Setting, name: str, names: list[str]) -> Setting:
    """The keys of ``setting`` that apply to the config called ``name``: unscoped keys and keys ``name:KEY``
    (returned without the scope)."""
    result: Setting = {}
    for key, value in setting.items():
        scope, _, bare = key.rpartition(":")
        if scope and scope not in names:
            raise SpecError(f"{key}: {scope!r} is not the name of a config ({', '.join(names)})")
        if scope in ("", name):
            if bare in result:
                raise SpecError(f"{bare} is given both for every config and for {name}; give it once")
            result[bare] = value
    return result


def plan_runs(
    configs: list[str],
    seeds: list[int],
    settings: list[Setting],
    fixed: Setting,
    rounds: int | None,
    runs_dir: str,
    base: Sequence[str] = (),
) -> list[Run]:
    """Configs x settings x seeds, seeds varying fastest; each config gets the keys scoped to it (``scoped``) and
    comes after the ``base`` files (a dataset's base.yaml under its per-strategy overlays)."""
    if len(set(seeds)) != len(seeds):
        raise SpecError("a seed is given twice in --seeds")
    stems = config_names(configs)
    runs = []
    for config, stem in zip(configs, stems, strict=True):
        mine = scoped(fixed, stem, stems)
        own_settings = list({tuple(s.items()): s for s in (scoped(s, stem, stems) for s in settings)}.values())
        clash = sorted(set(mine) & {key for setting in own_settings for key in setting})
        if clash:
            raise SpecError(f"{clash[0]} is both fixed (--set) and swept (--grid/--random); give it once")
        if rounds is not None and ("trainer.rounds" in mine or any("trainer.rounds" in s for s in own_settings)):
            raise SpecError("trainer.rounds is given both by --rounds and by --set/--grid/--random; give it once")
        for setting in own_settings:
            for seed in seeds:
                name = run_name(stem, setting, seed)
                argv = run_argv(config, mine, setting, seed, rounds, runs_dir, name, base)
                runs.append(Run(config, stem, setting, seed, name, argv))
    names = [run.name for run in runs]
    if len(set(names)) != len(names):
        raise SpecError("two settings give the same run name; use values that differ in letters or digits")
    return runs


def resolve_rounds(runs: list[Run]) -> dict[tuple[str, str], int]:
    """Validates each (config, setting)'s arguments with lightfed's own parser (nothing is trained) and returns
    its trainer.rounds, the last round a finished run has logged. The user's modules are found as ``lightfed fit``
    finds them (``lightfed.user_modules``)."""
    from lightfed.subcommands import build_parser

    parser = build_parser()[0]  # exit_on_error=False: an error is raised, not printed
    rounds = {}
    for run in runs:
        if run.group not in rounds:
            try:
                with user_modules(run.argv):
                    rounds[run.group] = parser.parse_args(run.argv)["fit"].trainer.rounds
            except ArgumentError as error:  # jsonargparse's, in the one line lightfed fit prints
                raise SpecError(f"run {run.name}: {parse_error_line(error)}") from None
            except Exception as error:  # a config file it cannot read
                raise SpecError(f"run {run.name}: {' '.join(str(error).split())}") from None
    return rounds
