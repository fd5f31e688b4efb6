"""Every script path that the README, the documentation, the CI and the scripts and their tests name exists."""

import re

from tests.scripts.script_modules import ROOT, SCRIPTS

PATH = re.compile(r"(?<![\w/.])scripts/[\w/]+\.(?:py|sh)")


def test_every_script_path_named_exists():
    pages = [ROOT / "README.md", SCRIPTS / "README.md", *(ROOT / "docs").rglob("*.md"), *(ROOT / ".ci").iterdir()]
    pages += [*SCRIPTS.rglob("*.py"), *SCRIPTS.rglob("*.sh"), *(ROOT / "tests" / "scripts").glob("*.py")]
    named = {(page.relative_to(ROOT).as_posix(), path) for page in pages for path in PATH.findall(page.read_text())}
    assert len({path for _, path in named}) >= 15  # every benchmark and study is named somewhere
    assert sorted((page, path) for page, path in named if not (ROOT / path).is_file()) == []


def test_the_pattern_finds_a_script_path_but_not_a_test_path():
    assert PATH.findall("`python scripts/benchmarks/data_benchmark.py --a` and tests/scripts/test_harness.py") == [
        "scripts/benchmarks/data_benchmark.py"
    ]
