"""MuJoCo simulation core (pure Python, no rclpy): the embedded default robot.

``scene`` holds the arm + table + objects model and the torque-level step,
``camera`` the Kinect-like RGB-D renderer. The model files live in ``assets/``.
``task`` (language grasp tasks and their evaluation), ``runtime`` (scene, camera,
task and tracker on one clock, shared by ``env.GraspEnv`` and ``sim_node``),
``expert`` (scripted IK expert emitting action chunks) and ``expert_eval`` build
the grasp task on top.

Importing this package picks a headless OpenGL backend for MuJoCo when the user
chose none: on Linux ``MUJOCO_GL=egl`` (GPU or Mesa EGL, no display needed).
This must happen before ``mujoco`` is first imported; an explicit ``MUJOCO_GL``
(``osmesa`` for pure software rendering, ``glfw`` with a display) always wins.
"""

import os
import sys

if sys.platform.startswith("linux"):
    os.environ.setdefault("MUJOCO_GL", "egl")
