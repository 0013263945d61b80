"""bench/ sits above the algorithm packages (like cli/): nothing below imports it, and
every ``dpr bench`` subcommand runs a module of it, listed in its docstring."""

import re
from pathlib import Path

import diffusion_policy_ros.bench as bench

from ..source_imports import source_imports

PACKAGE = Path(bench.__file__).resolve().parent.parent
ABOVE_BENCH = {"bench", "cli"}


def test_no_algorithm_module_imports_bench():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if rel.parts[0] in ABOVE_BENCH:
            continue
        if any(m == "diffusion_policy_ros.bench" or m.startswith("diffusion_policy_ros.bench.")
               for m in source_imports(path, with_names=True)):
            offenders.append(str(rel))
    assert not offenders, f"import diffusion_policy_ros.bench from below it: {offenders}"


def test_every_bench_module_is_listed_and_every_dpr_bench_target_is_in_bench():
    modules = {p.stem for p in (PACKAGE / "bench").glob("*.py") if p.stem != "__init__"}
    listed = set(re.findall(r"^``(\w+)``\s{2,}", bench.__doc__, re.M))  # table rows
    assert listed == modules
    cli = (PACKAGE / "cli" / "bench.py").read_text(encoding="utf-8")
    targets = set(re.findall(r"diffusion_policy_ros\.(\w+)", cli)) - {"cli"}
    assert targets == {"bench"}, targets
