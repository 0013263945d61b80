"""Check that every relative markdown link in README.md and docs/ (every page, any depth)
points to an existing file, and that every #anchor names a heading of the target file.

Usage: python scripts/check_links.py [REPO_ROOT]; exit status 1 if a link is broken.
"""

import re
import sys
from pathlib import Path

LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)\)")


def strip_code(text: str) -> str:
    """The text without fenced code blocks and without code spans that look like links."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    return re.sub(r"`[^`\n]*`", lambda m: "" if "](" in m.group(0) else m.group(0), text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = strip_code(path.read_text())
    return {slug(m.group(1)) for m in re.finditer(r"^#+\s+(.*)$", text, re.M)}


def broken_links(root: Path) -> tuple[int, list[str]]:
    checked, broken = 0, []
    for md in [root / "README.md", *sorted((root / "docs").rglob("*.md"))]:
        for m in LINK.finditer(strip_code(md.read_text())):
            target = m.group(1)
            if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
                continue
            checked += 1
            path, _, anchor = target.partition("#")
            dest = (md.parent / path).resolve() if path else md
            if not dest.exists():
                broken.append(f"{md.relative_to(root)}: missing file {target}")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{md.relative_to(root)}: missing anchor {target}")
    return checked, broken


def main() -> int:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    checked, broken = broken_links(root)
    print("\n".join(broken + [f"{checked} relative links checked, {len(broken)} broken"]))
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
