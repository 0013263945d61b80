"""README.md and every page below docs/: each relative link points to a file and heading."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_relative_link_in_the_readme_and_docs_resolves():
    result = subprocess.run([sys.executable, str(ROOT / "scripts/check_links.py"), str(ROOT)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
