"""The repository speaks of the product, not of the work that made it.

Code, tests, configuration and documentation say what the product is, how to use it
and what it measures now. Work sessions, conversation turns and issue numbers belong to
the issue tracker and the git history (and, in short, to CHANGELOG.md), so a tracked
text file that names them fails here. Technical uses stay allowed: pytest's session
scope, ONNX Runtime's inference sessions, a process's session id, and references to
upstream bugs (``ros2/rmw_fastrtps#390``).
"""

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Text files by suffix (``.launch.py`` ends in ``.py``), plus the few without one.
TEXT_SUFFIXES = {".md", ".py", ".yaml", ".yml", ".sh", ".txt", ".toml", ".cfg", ".ini",
                 ".xml", ".urdf", ".rviz", ".json", ".jsonl"}
TEXT_NAMES = {".ci/run", ".gitignore"}

#: What is not allowed, each with what it catches.
FORBIDDEN = {
    "work session": re.compile(r"\bsessions?\b", re.I),
    "conversation turn": re.compile(
        r"\b(?:this|previous|earlier|later|former)\s+turn\b"   # "this turn" (not "this turns X")
        r"|\b(?:previous|earlier|later|former)\s+turns\b", re.I),
    "issue number": re.compile(
        r"(?<![\w/.\-])#\d+\b"                  # "#15", "(#18)"; not "ros2/rclpy#390"
        r"|\b(?:issues?|pr|pull request)\s+#?\d+\b", re.I),  # "issue 6", "Issue #15"
}

#: Technical uses of the same words: a match inside one of these is allowed.
ALLOWED = [re.compile(p, re.I) for p in (
    r"""scope\s*=\s*["']session["']""",      # pytest fixtures
    r"\bsession-scoped\b",                  # ... and their docstrings
    r"\beach session declares\b",           # ONNX Runtime InferenceSession inputs
    r"\bsession ids?\b",                    # a process's session (setsid, /proc/PID/stat)
    r"\bits (?:own )?session\b",            # a command started in a session of its own
    r"\bin session ``sid``",
    r"\bthe session's processes\b",
)]

#: Files exempt as a whole, each with the reason. Keep this short: fix prose instead.
EXEMPT = {
    "test/test_project_words.py": "names the forbidden words to test for them",
}


def text_files() -> list[Path]:
    """Tracked files and new files git does not ignore, that are text by their name."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
            cwd=ROOT, capture_output=True, check=True, timeout=60).stdout.decode()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the files to check are git's")
    names = sorted(set(n for n in listed.split("\0") if n))
    return [ROOT / n for n in names
            if (n in TEXT_NAMES or Path(n).suffix in TEXT_SUFFIXES) and n not in EXEMPT
            and (ROOT / n).is_file()]


def hits_in(text: str) -> list[tuple[int, str, str]]:
    """(line number, kind, the line) for every forbidden word not inside an allowed use."""
    found = []
    if not any(pattern.search(text) for pattern in FORBIDDEN.values()):
        return found  # most files, and the long JSON reports, in one pass each
    for number, line in enumerate(text.splitlines(), 1):
        allowed = [m.span() for a in ALLOWED for m in a.finditer(line)]
        for kind, pattern in FORBIDDEN.items():
            for m in pattern.finditer(line):
                if not any(start <= m.start() and m.end() <= end for start, end in allowed):
                    found.append((number, kind, line.strip()))
    return found


def test_the_rules_catch_work_words_and_spare_technical_ones():
    for bad in ("the thirty-first session", "in this session's runs", "two sessions",
                "issue #15", "(#18)", "Issue 6", "issues 15 and 17", "see #2", "in this turn",
                "as in previous turns"):
        assert hits_in(bad), bad
    for fine in ('@pytest.fixture(scope="session")', "Session-scoped: built once",
                 "onnxruntime.InferenceSession(path)", "feed only what each session declares",
                 "fields[3]: session id", "run as in a terminal: its own session",
                 "ros2/rmw_fastrtps#390", "eProsima/Fast-DDS#5469", "colour #ff0000",
                 "self.chunk_session.run", "session_processes(sid)", "in turn, the tracker",
                 "the next turn of the loop", "page 3#section",
                 "the rules that turn bad options into errors", "this turns a damped loop into"):
        assert not hits_in(fine), fine


def test_no_tracked_text_names_work_sessions_turns_or_issue_numbers():
    report = []
    for path in text_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        report += [f"{path.relative_to(ROOT)}:{n}: {kind}: {line[:160]}"
                   for n, kind, line in hits_in(text)]
    assert not report, (f"{len(report)} mentions of work sessions, turns or issue numbers "
                        "(say what the product does; history is git's):\n"
                        + "\n".join(report))


def test_documentation_headings_carry_no_dates():
    """The manual is not a diary: a heading names a subject, not a day. CHANGELOG.md is
    by date on purpose; docs/bench and docs/results are dated measurement records."""
    dated = re.compile(r"^#{1,6}\s.*\b20\d\d-\d\d-\d\d\b", re.M)
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    report = [f"{page.relative_to(ROOT)}: {m.group(0)}" for page in pages
              if page.parts[len(ROOT.parts):][:2] not in (("docs", "bench"), ("docs", "results"))
              for m in dated.finditer(page.read_text(encoding="utf-8"))]
    assert not report, "dated headings:\n" + "\n".join(report)
