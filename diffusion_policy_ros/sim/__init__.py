"""MuJoCo simulation core (pure Python, no rclpy): the embedded default robot.

``scene`` holds the arm + table + objects model and the torque-level step,
``camera`` the Kinect-like RGB-D renderer. The model files live in ``assets/``.

Importing this package picks a headless OpenGL backend for MuJoCo when the user
chose none: on Linux ``MUJOCO_GL=egl`` (GPU or Mesa EGL, no display needed).
This must happen before ``mujoco`` is first imported; an explicit ``MUJOCO_GL``
(``osmesa`` for pure software rendering, ``glfw`` with a display) always wins.
"""

import os
import sys

if sys.platform.startswith("linux"):
    os.environ.setdefault("MUJOCO_GL", "egl")
