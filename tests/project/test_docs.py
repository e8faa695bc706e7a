"""The documentation's links: every relative link of README.md, CHANGELOG.md,
ARCHITECTURE.md and docs/*.md resolves (its #anchor too). The commands of their shell
blocks are checked by test_doc_commands.py.
"""

import pathlib
import re


REPO = pathlib.Path(__file__).resolve().parent.parent.parent
PAGES = sorted(
    [REPO / "README.md", REPO / "CHANGELOG.md", REPO / "ARCHITECTURE.md"]
    + list((REPO / "docs").glob("*.md"))
)
# Pages that other work adds to docs/ and that the index already links.
EXPECTED_LATER = {
    "padding.md",
    "robustness.md",
    "paper_experiments.md",
    "own_task.md",
}


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading."""
    text = re.sub(r"[`*]", "", heading.strip().lower())  # "_" stays, as on GitHub.
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: pathlib.Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    return {github_anchor(m) for m in re.findall(r"^#+ (.+)$", text, re.M)}


def links(page: pathlib.Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    return re.findall(r"\]\(([^)\s]+)\)", text)


def test_every_relative_link_resolves():
    broken = []
    for page in PAGES:
        for link in links(page):
            if re.match(r"[a-z]+:", link):
                continue  # https:, mailto:
            path, _, anchor = link.partition("#")
            target = (page.parent / path).resolve() if path else page
            if not target.exists():
                if target.name in EXPECTED_LATER and target.parent == REPO / "docs":
                    continue
                broken.append(f"{page.name}: {link}")
            elif anchor and target.suffix == ".md" and anchor not in anchors(target):
                broken.append(f"{page.name}: {link} (no such heading)")
    assert not broken, broken


def test_pages_expected_later_are_linked_from_the_index():
    """EXPECTED_LATER may only excuse pages that the index links."""
    index = (REPO / "docs" / "index.md").read_text()
    for name in EXPECTED_LATER:
        assert f"]({name})" in index
