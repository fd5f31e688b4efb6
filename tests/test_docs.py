"""The documentation: its example strategy works as documented, the configs, tests and links it names exist, and the
README stays a short entry point whose config is the quickstart's."""

import re
from pathlib import Path

import torch
import yaml

from lightfed import ClientUpdate, Sums
from lightfed.strategies import ServerContext
from tests.conftest import small_data, small_model, small_trainer

ROOT = Path(__file__).resolve().parents[1]
STRATEGIES_GUIDE = ROOT / "docs" / "guides" / "strategies.md"


def _example_code() -> str:
    section = STRATEGIES_GUIDE.read_text()
    section = section[section.index("## Writing a strategy on the sums path") :]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def _example_strategy_class():
    namespace: dict = {}
    exec(compile(_example_code(), str(STRATEGIES_GUIDE), "exec"), namespace)
    return namespace["UniformAvgM"]


def test_documented_strategy_is_short_and_computes_uniform_mean_with_momentum():
    UniformAvgM = _example_strategy_class()
    assert len(_example_code().splitlines()) <= 40
    strategy = UniformAvgM(server_lr=0.5, momentum=0.5)
    params = torch.tensor([1.0, 1.0, 1.0])
    strategy.setup(ServerContext(params, num_clients=2))
    for step, deltas in enumerate([([2.0, 0.0, 4.0], [0.0, 2.0, 0.0]), ([1.0, 1.0, 1.0], [1.0, 1.0, 1.0])]):
        sums = Sums(strategy.sum_sizes(), torch.device("cpu"))
        for client_id, delta in enumerate(deltas):
            strategy.accumulate(
                sums, ClientUpdate(client_id, torch.tensor(delta), torch.zeros(0), 99, 1, 1.0, torch.tensor(0.0))
            )
        params = strategy.aggregate(params, sums, round=step)
    # v1 = [1, 1, 2], x1 = [1.5, 1.5, 2]; v2 = 0.5 * v1 + [1, 1, 1] = [1.5, 1.5, 2], x2 = x1 + 0.5 * v2
    assert torch.allclose(params, torch.tensor([2.25, 2.25, 3.0]))


def test_documented_strategy_trains_and_resumes_with_its_state(tmp_path):
    UniformAvgM = _example_strategy_class()
    full = small_model()
    small_trainer(tmp_path / "full", rounds=3).fit(full, small_data(), UniformAvgM(momentum=0.5))
    small_trainer(tmp_path / "cut", rounds=1).fit(small_model(), small_data(), UniformAvgM(momentum=0.5))
    resumed = small_model()
    metrics = small_trainer(tmp_path / "cut", rounds=3).fit(
        resumed, small_data(), UniformAvgM(momentum=0.5), ckpt_path="last"
    )
    assert metrics["strategy/velocity_norm"] > 0
    assert all(torch.equal(a, b) for a, b in zip(full.parameters(), resumed.parameters(), strict=True))


def test_readme_is_short_and_its_links_exist():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme)
    local = [target for target in targets if "://" not in target]
    assert local, "the README links the documentation pages"
    assert [target for target in local if not (ROOT / target).exists()] == []


def test_the_tests_the_guarantees_name_exist():
    guarantees = (ROOT / "docs" / "guides" / "guarantees.md").read_text()
    named = set(re.findall(r"`(tests/[\w/]+\.py)(?:::\w+)?`", guarantees))
    assert len(named) >= 10
    assert sorted(path for path in named if not (ROOT / path).is_file()) == []


def named_tests(text: str) -> list[tuple[str, str]]:
    """(file, test) for each `tests/....py::test_x` in ``text``, and for each `::test_y` that follows it in a cell."""
    pairs = []
    for cell in text.split("|"):
        path = None
        for match in re.finditer(r"`(tests/[\w/]+\.py)?::(\w+)`|`(tests/[\w/]+\.py)`", cell):
            path = match.group(1) or match.group(3) or path
            if match.group(2) and path:
                pairs.append((path, match.group(2)))
    return pairs


def test_the_named_tests_are_found_in_their_files():
    assert named_tests("| `tests/a.py::test_x`, `::test_y`, `tests/b.py` | `::test_z` |") == [
        ("tests/a.py", "test_x"),
        ("tests/a.py", "test_y"),
    ]
    guarantees = (ROOT / "docs" / "guides" / "guarantees.md").read_text()
    pairs = named_tests(guarantees)
    assert len(pairs) >= 8
    missing = [
        f"{path}::{name}" for path, name in pairs if not re.search(rf"^def {name}\(", (ROOT / path).read_text(), re.M)
    ]
    assert missing == []


def test_the_readmes_config_is_the_quickstart():
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"## A config.*?```yaml\n(.*?)```", readme, re.S).group(1)
    assert yaml.safe_load(block) == yaml.safe_load((ROOT / "configs" / "quickstart.yaml").read_text())


def test_every_config_the_docs_name_exists():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    named = {path for page in pages for path in re.findall(r"configs/[\w./-]+\.yaml", page.read_text())}
    assert "configs/digits/base.yaml" in named
    assert sorted(path for path in named if not (ROOT / path).is_file()) == []


# The prose metrics: every page of the site reads as guides researchers already like (Flower's, Lightning's: 14-16
# words a sentence, 21-27 a paragraph), measured on prose only. `python tests/test_docs.py` prints them for each page.
MAX_WORDS_PER_SENTENCE = 20.0  # a page's average
MAX_WORDS_PER_PARAGRAPH = 60.0  # a page's average
MAX_PARAGRAPH_WORDS = 150  # any one paragraph


def prose_paragraphs(markdown: str) -> list[str]:
    """The prose of a Markdown page, a paragraph (or list item) each: code blocks, tables, headings, admonition and
    block markers, HTML, maths blocks and link definitions removed; inline code and inline maths count as one word."""
    text = re.sub(r"^[ \t]*(`{3,}|~{3,}).*?^[ \t]*\1[ \t]*$", "\n", markdown, flags=re.S | re.M)
    text = re.sub(r"^\s*\$\$.*?\$\$\s*$", "\n", text, flags=re.S | re.M)
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    text = re.sub(r"^:::.*\n(?:[ \t]+.*\n)*", "\n", text, flags=re.M)  # mkdocstrings' blocks and their options
    paragraphs, current = [], []
    for line in [*text.splitlines(), ""]:
        stripped = line.strip()
        marker = stripped.startswith(("#", "|", "!!!", "???", "<", "---", "--8<--")) or re.match(
            r"^\[[^\]]+\]:\s", stripped
        )
        item = re.match(r"^([-*+]|\d+[.)])\s+(.*)", stripped)
        if current and (not stripped or marker or item):
            paragraphs.append(" ".join(current))
            current = []
        if stripped and not marker:
            current.append(item.group(2) if item else stripped)
    prose = []
    for paragraph in paragraphs:
        paragraph = re.sub(r"!\[[^\]]*\]\([^)]*\)", "", paragraph)  # images
        paragraph = re.sub(r"\[([^\]]*)\](\([^)]*\)|\[[^\]]*\])", r"\1", paragraph)  # links: their text
        paragraph = re.sub(r"`[^`]*`|\$[^$]+\$", "CODE", paragraph)
        if re.search(r"[A-Za-z]{2}", paragraph.replace("CODE", "")):
            prose.append(paragraph)
    return prose


def sentences(paragraph: str) -> list[str]:
    """A paragraph's sentences: split after . ! ? before a capital, a digit, code or a bracket."""
    for abbreviation in ("e.g.", "i.e.", "vs.", "etc.", "cf."):
        paragraph = paragraph.replace(abbreviation, abbreviation[:-1])
    parts = re.split(r"(?<=[.!?])[\"')\]*]*\s+(?=[A-Z0-9(`\"'\[*])", paragraph)
    return [part for part in parts if re.search(r"\w", part)]


def words(text: str) -> list[str]:
    return re.findall(r"[\w'’]+(?:[-.][\w'’]+)*", text)


def prose_metrics(markdown: str) -> dict[str, float]:
    """Words per sentence and per paragraph (averages) and the longest paragraph, on prose only."""
    paragraphs = prose_paragraphs(markdown)
    counts = [len(words(paragraph)) for paragraph in paragraphs]
    count_sentences = sum(len(sentences(paragraph)) for paragraph in paragraphs)
    return {
        "words_per_sentence": sum(counts) / max(count_sentences, 1),
        "words_per_paragraph": sum(counts) / max(len(paragraphs), 1),
        "longest_paragraph": max(counts, default=0),
    }


def prose_failures(metrics: dict[str, float]) -> list[str]:
    failures = []
    if metrics["words_per_sentence"] > MAX_WORDS_PER_SENTENCE:
        failures.append(f"{metrics['words_per_sentence']:.1f} words a sentence > {MAX_WORDS_PER_SENTENCE}")
    if metrics["words_per_paragraph"] > MAX_WORDS_PER_PARAGRAPH:
        failures.append(f"{metrics['words_per_paragraph']:.1f} words a paragraph > {MAX_WORDS_PER_PARAGRAPH}")
    if metrics["longest_paragraph"] > MAX_PARAGRAPH_WORDS:
        failures.append(f"a paragraph of {metrics['longest_paragraph']} words > {MAX_PARAGRAPH_WORDS}")
    return failures


def site_pages() -> list[str]:
    return sorted(str(page.relative_to(ROOT / "docs")) for page in (ROOT / "docs").rglob("*.md"))


def test_the_prose_metrics_measure_prose_only():
    page = (
        "# A heading that is long enough to count if headings were prose\n\n"
        "One two three four. Five six `seven eight nine` ten!\n"
        "Eleven [twelve](https://example.org) thirteen e.g. fourteen.\n\n"
        "```python\nnot = prose + at + all\n```\n\n"
        "| a table | of | words |\n|---|---|---|\n| not | prose | either |\n\n"
        '!!! note "A title"\n    Inside an admonition: counted.\n\n'
        "- an item.\n- another item here.\n"
    )
    assert prose_paragraphs(page) == [
        "One two three four. Five six CODE ten! Eleven twelve thirteen e.g. fourteen.",
        "Inside an admonition: counted.",
        "an item.",
        "another item here.",
    ]
    assert sentences(prose_paragraphs(page)[0]) == [
        "One two three four.",
        "Five six CODE ten!",
        "Eleven twelve thirteen e.g fourteen.",
    ]
    metrics = prose_metrics(page)
    assert metrics == {"words_per_sentence": 22 / 6, "words_per_paragraph": 22 / 4, "longest_paragraph": 13}
    assert prose_paragraphs("::: lightfed.core\n    options:\n      heading_level: 1\n") == []
    assert prose_failures(metrics) == []
    assert prose_failures(prose_metrics(" ".join(["word"] * 151) + ".")) == [
        "151.0 words a sentence > 20.0",
        "151.0 words a paragraph > 60.0",
        "a paragraph of 151 words > 150",
    ]


def test_every_page_reads_as_short_sentences_and_paragraphs():
    pages = site_pages()
    assert "index.md" in pages and len(pages) >= 30
    failing = {
        page: failures
        for page in pages
        if (failures := prose_failures(prose_metrics((ROOT / "docs" / page).read_text())))
    }
    assert failing == {}


if __name__ == "__main__":  # the metrics of every page: python -m tests.test_docs
    print(f"{'page':42} {'words/sentence':>15} {'words/paragraph':>16} {'longest paragraph':>18}")
    for page in site_pages():
        metrics = prose_metrics((ROOT / "docs" / page).read_text())
        mark = "  FAILS" if prose_failures(metrics) else ""
        print(
            f"{page:42} {metrics['words_per_sentence']:15.1f} {metrics['words_per_paragraph']:16.1f}"
            f" {metrics['longest_paragraph']:18d}{mark}"
        )


def test_the_faqs_error_lines_are_what_lightfed_prints(tmp_path, monkeypatch, capsys):
    """Each `$ lightfed ...` line of the FAQ, run as shown (from a folder with the configs), refuses with the
    `lightfed: error:` line the FAQ shows under it."""
    from tests.conftest import refusal_lines

    faq = (ROOT / "docs" / "faq.md").read_text()
    pairs = re.findall(r"^\$ lightfed (.+)\n(lightfed: error: .+)$", faq, re.M)
    assert len(pairs) >= 12
    (tmp_path / "configs").symlink_to(ROOT / "configs")
    monkeypatch.chdir(tmp_path)
    differ = {}
    for command, line in pairs:
        if "accelerator gpu" in command and torch.cuda.is_available():
            continue  # the line of a machine without a GPU
        printed = refusal_lines(command.split(), capsys)
        if printed != [line]:
            differ[command] = printed
    assert differ == {}
