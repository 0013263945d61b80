"""The robot path (sync, policy, tracker nodes) runs without the simulator.

On a real arm neither MuJoCo nor ``diffusion_policy_ros.sim`` need be installed or
loaded: importing the nodes in a fresh interpreter, and computing the markers'
forward kinematics the way ``policy_node`` does, must not pull them in; nor may any
import inside a function of a module the nodes reach (what a fresh import misses).
"""

import ast
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

NODES = ("diffusion_policy_ros.ros.policy_node", "diffusion_policy_ros.ros.rgbd_sync_node",
         "diffusion_policy_ros.ros.pd_tracker_node")


def _simulator(name: str) -> bool:
    return (name == "mujoco" or name.startswith("mujoco.")
            or name == "diffusion_policy_ros.sim" or name.startswith("diffusion_policy_ros.sim."))


def test_importing_the_nodes_loads_no_simulator():
    code = f"""
import json, sys
for name in {NODES!r}:
    __import__(name)
from diffusion_policy_ros.description import URDF_PATH
from diffusion_policy_ros.policy.kinematics import urdf_kinematics
from diffusion_policy_ros.policy.node_config import PolicyNodeConfig
cfg = PolicyNodeConfig()
urdf_kinematics(URDF_PATH, cfg.joint_names, cfg.tool_link).tool_positions([[0.0] * 7])
print(json.dumps(sorted(sys.modules)))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120)
    modules = json.loads(out.stdout.strip().splitlines()[-1])
    assert set(NODES) <= set(modules)
    assert [m for m in modules if _simulator(m)] == []


def _imports(module: str) -> set[str]:
    """Every module ``module``'s source imports, at top level or inside functions."""
    found = {module.rsplit(".", i)[0] for i in range(1, module.count(".") + 1)}
    tree = ast.parse(Path(importlib.util.find_spec(module).origin).read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
            if node.module.startswith("diffusion_policy_ros"):
                found |= {f"{node.module}.{alias.name}" for alias in node.names
                          if _is_module(f"{node.module}.{alias.name}")}
    return found


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def test_no_module_the_nodes_reach_imports_the_simulator_even_lazily():
    reached, pending, offenders = set(), list(NODES), []
    while pending:
        module = pending.pop()
        if module in reached:
            continue
        reached.add(module)
        for name in _imports(module):
            if _simulator(name):
                offenders.append(f"{module} imports {name}")
            elif name.startswith("diffusion_policy_ros") and _is_module(name):
                pending.append(name)
    assert "diffusion_policy_ros.policy.kinematics" in reached
    assert offenders == []
