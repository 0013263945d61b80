"""README.md and every page below docs/: each relative link points to a file and heading."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_relative_link_in_the_readme_and_docs_resolves():
    result = subprocess.run([sys.executable, str(ROOT / "scripts/check_links.py"), str(ROOT)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_docs_page_named_in_code_config_and_tests_exists():
    """Docstrings and config comments point readers at pages of the manual: those exist."""
    files = subprocess.run(["git", "ls-files", "diffusion_policy_ros", "config", "scripts",
                            "launch", "test"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    named = set()
    for name in files:
        path = ROOT / name
        if path.suffix in (".py", ".yaml", ".sh", ".xml"):
            named.update(re.findall(r"\bdocs/[\w./-]+\.md\b", path.read_text()))
    assert named, "no page named"
    missing = sorted(page for page in named if not (ROOT / page).exists())
    assert missing == [], missing
