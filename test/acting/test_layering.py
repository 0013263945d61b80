"""acting/ sits below its callers: it imports neither ros/ nor learning/ (they import it),
nor rclpy, torch or the simulator, so a node, an evaluation and a rollout worker share it
as it is."""

import subprocess
import sys
from pathlib import Path

import diffusion_policy_ros.acting as acting

from ..source_imports import source_imports

FORBIDDEN = ("diffusion_policy_ros.ros", "diffusion_policy_ros.learning",
             "diffusion_policy_ros.sim", "diffusion_policy_ros.policy", "rclpy", "torch",
             "mujoco")


def test_acting_imports_none_of_its_callers_nor_ros_torch_or_the_simulator():
    offenders = [f"{path.name} imports {name}"
                 for path in sorted(Path(acting.__file__).parent.glob("*.py"))
                 for name in source_imports(path)
                 if any(name == f or name.startswith(f + ".") for f in FORBIDDEN)]
    assert offenders == []


def test_importing_the_agent_loads_no_torch():
    code = ("import sys; import diffusion_policy_ros.acting.agent, "
            "diffusion_policy_ros.acting.grasp_rules; "
            "assert 'torch' not in sys.modules and 'rclpy' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
