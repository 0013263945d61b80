"""Shared fixtures for the MuJoCo simulation tests.

A headless OpenGL backend must be chosen before ``mujoco`` is imported: EGL if
a context can actually be created (probed in a subprocess, because a failed
backend cannot be swapped inside one process), else OSMesa (software).
"""

import os
import subprocess
import sys

import pytest

_PROBE = "import mujoco; c = mujoco.GLContext(16, 16); c.make_current(); c.free()"


def _gl_backend_works(backend: str) -> bool:
    env = {**os.environ, "MUJOCO_GL": backend}
    try:
        return subprocess.run([sys.executable, "-c", _PROBE], env=env, timeout=60,
                              capture_output=True).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


if "MUJOCO_GL" not in os.environ:
    os.environ["MUJOCO_GL"] = "egl" if _gl_backend_works("egl") else "osmesa"

from diffusion_policy_ros.sim.scene import ArmScene  # noqa: E402


@pytest.fixture
def scene() -> ArmScene:
    return ArmScene()
