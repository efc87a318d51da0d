"""Every citation of a docs page's section names a section that page has.

Code, benchmarks and docs cite measurements and reasons as `docs/<page>.md, "<section>"`
(code says what and how, the docs say why and how fast). When a section moves or is
renamed, the citation must follow it. A section is a heading, a bold lead-in (`**...**`), a list
item or the start of a paragraph; a citation may name its first words only.
"""

import os
import re
import unittest
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
SOURCE_SUFFIXES = (".py", ".cc", ".h", ".md")
# The repository's own sources and docs (not a virtual environment or run folder inside it).
SOURCE_FOLDERS = ("psmm_tf", "trainers", "export", "benchmarks", "tests", "docs")
# `docs/results.md, "The machine's limit"`, `docs/results.md ("The machine's limit")` and the
# link `[docs/results.md](docs/results.md), "The machine's limit"`; the text is read with its
# line breaks and comment markers taken out.
CITATION = re.compile(r'(?:\]\(docs/([\w/.-]+\.md)\)|docs/([\w/.-]+\.md)),? \(?"([^"]+)"')
LINE_BREAK = re.compile(r"\s*\n\s*(?:#|//|\*)?\s*")


def source_files():
    """The repository's own source and docs files (this one left out: its examples cite pages
    that do not exist)."""
    this_file = Path(__file__).resolve()
    yield from sorted(REPO_ROOT.glob("*.md"))
    for top in SOURCE_FOLDERS:
        for folder, subfolders, names in os.walk(REPO_ROOT / top):
            subfolders[:] = [name for name in subfolders
                             if not name.startswith(".") and name != "__pycache__"]
            for name in names:
                path = Path(folder) / name
                if path.suffix in SOURCE_SUFFIXES and path != this_file:
                    yield path


def citations(text):
    """[(page, section)] cited in `text`."""
    return [(link or plain, section)
            for link, plain, section in CITATION.findall(LINE_BREAK.sub(" ", text))]


def section_starts(text):
    """What a citation of this page may start with: each heading, list item and paragraph from
    its start to its paragraph's end (heading and list markers and bold marks taken out,
    whitespace collapsed), and every bold span."""
    lines = text.split("\n")
    starts = []
    for index, line in enumerate(lines):
        starts_a_section = line.strip() and (
            index == 0 or not lines[index - 1].strip()
            or re.match(r"\s*(#+|[-*]|\d+\.) ", line))
        if not starts_a_section:
            continue
        paragraph = [line.strip()]
        for following in lines[index + 1:]:
            if not following.strip() or re.match(r"\s*(#+|[-*]|\d+\.) ", following):
                break
            paragraph.append(following.strip())
        starts.append(" ".join(paragraph).lstrip("#-* ").replace("**", ""))
    collapsed = re.sub(r"\s+", " ", text)
    starts.extend(re.findall(r"\*\*(.+?)\*\*", collapsed))
    return starts


def unresolved(sources, read_page):
    """["name: page, section"] for each citation no section of its page starts with.

    Args:
        sources: (name, text) of each file read.
        read_page: a page's name (as cited after `docs/`) -> its text, or None where it has none.
    """
    missing, pages = [], {}
    for name, text in sources:
        for page, section in citations(text):
            if page not in pages:
                text = read_page(page)
                pages[page] = None if text is None else section_starts(text)
            starts, cited = pages[page], section.removesuffix(" ...")
            if starts is None or not any(start.startswith(cited) for start in starts):
                missing.append(f"{name}: docs/{page}, {section!r}")
    return missing


def read_docs_page(page):
    path = REPO_ROOT / "docs" / page
    return path.read_text(encoding="utf-8") if path.is_file() else None


class DocsCitationsTest(unittest.TestCase):
    def test_every_cited_section_exists(self):
        files = list(source_files())
        self.assertGreater(len([f for f in files if f.suffix == ".py"]), 100)  # the tree is read
        sources = [(str(f.relative_to(REPO_ROOT)), f.read_text(encoding="utf-8")) for f in files]
        self.assertGreater(sum(len(citations(text)) for _, text in sources), 20)
        self.assertEqual(unresolved(sources, read_docs_page), [])

    def test_a_moved_section_is_reported(self):
        # The check itself: a citation whose section is gone, one of a page that does not
        # exist, one of a paragraph's second line, beside ones that resolve (split over comment
        # lines, a link); a page's parenthesis followed by a quoted word is no citation.
        page = ("# Results\n\n## The machine's limit on a CPU\n\n"
                "- **How the tests stay cheap.** x\n\nA paragraph whose second line\n"
                "starts like a section.\n")
        text = ('# (docs/results.md, "The machine\'s limit") and docs/results.md, "How the tests\n'
                '# stay cheap"; [docs/results.md](docs/results.md), "A paragraph whose";\n'
                '# docs/results.md, "The medium\n# start"; docs/gone.md, "Anything";\n'
                '# docs/results.md, "starts like a section"; (docs/results.md), "on" or "off".')
        found = unresolved([("psmm_tf/cited.py", text)],
                           lambda name: page if name == "results.md" else None)
        self.assertEqual(found, ["psmm_tf/cited.py: docs/results.md, 'The medium start'",
                                 "psmm_tf/cited.py: docs/gone.md, 'Anything'",
                                 "psmm_tf/cited.py: docs/results.md, 'starts like a section'"])


if __name__ == "__main__":
    unittest.main()
