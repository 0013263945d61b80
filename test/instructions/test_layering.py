"""instructions/ is pure Python + numpy: the simulator, the evaluator and the nodes share it."""

from pathlib import Path

import diffusion_policy_ros.instructions as instructions

from ..source_imports import source_imports


def test_instructions_import_only_numpy_and_themselves():
    found = {name for path in Path(instructions.__file__).parent.glob("*.py")
             for name in source_imports(path)}
    assert {n for n in found if not n.startswith(("diffusion_policy_ros.instructions",
                                                   "__future__", "collections", "dataclasses",
                                                   "re", "numpy"))} == set()
