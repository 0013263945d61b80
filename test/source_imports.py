"""What a module's source imports, read from its syntax tree (nothing is imported): the
layering tests check the package's import directions with it."""

import ast
from pathlib import Path


def source_imports(path: Path, with_names: bool = False) -> set[str]:
    """Absolute imports of ``path``, at top level or inside functions; ``with_names``:
    ``from M import N`` gives ``M.N`` too (N may be a submodule)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
            if with_names:
                found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found
