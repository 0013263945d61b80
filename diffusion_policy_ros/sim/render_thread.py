"""``RenderThread``: a camera drawn on a thread of its own, off the simulation loop.

In ``sim_node`` the physics and the arm controller are one lockstep loop: after each
``joint_states`` the physics waits for the controller's command. Drawing a frame inside
that loop (GL pass, read-back, depth conversion, image encoding, publishing) stalls it
for several milliseconds 30 times per sim second, and the whole loop with it. MuJoCo
releases the GIL while it draws, so here the loop only captures the frame's geometry at
its instant (``KinectCamera.capture``, no GL) and this thread draws it with a GL context
of its own, on another core, while the physics steps on.

Frames come out through ``on_frame(token, rgbd)``, called on this thread in submission
order. At most ``pending`` captured frames wait; ``submit`` then blocks until one is
drawn (counted in ``blocked``), so a renderer that cannot keep up slows the simulation
down instead of dropping frames. ``drain`` waits until every submitted frame is out, as
before a reset. An exception on the thread is raised again by the next ``submit`` or
``drain``.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Any

import mujoco

from diffusion_policy_ros.monitoring import RollingStats
from diffusion_policy_ros.sim.camera import KinectCamera, RgbdFrame

#: How long ``submit`` waits for a free scene between checks that the thread still runs (s).
_POLL_S = 0.5


class RenderThreadError(RuntimeError):
    """The render thread stopped (GL context, drawing or ``on_frame`` failed)."""


class RenderThread:
    """Draws ``KinectCamera`` frames captured by another thread; see the module docstring."""

    def __init__(self, model: mujoco.MjModel, width: int, height: int,
                 on_frame: Callable[[Any, RgbdFrame], None], pending: int = 2,
                 name: str = "sim_render"):
        if pending < 1:
            raise ValueError(f"pending must be at least 1, got {pending}")
        self._on_frame = on_frame
        self._requests: queue.Queue = queue.Queue()
        self._free: queue.Queue = queue.Queue()
        self._failure: BaseException | None = None
        self._ready = threading.Event()
        self.camera: KinectCamera | None = None
        #: Wall time from taking a captured frame to ``on_frame`` returning (ms).
        self.frame_ms = RollingStats(window=300)
        #: Frames ``submit`` had to wait for (all ``pending`` scenes still being drawn).
        self.blocked = 0
        self.frames = 0
        self._thread = threading.Thread(target=self._run, args=(model, width, height, pending),
                                        name=name, daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._failure is not None:
            self._thread.join()
            raise RenderThreadError(f"camera set-up failed: {self._failure}") from self._failure

    # -- the simulation loop's side -----------------------------------------------------------

    def submit(self, data: mujoco.MjData, token: object) -> None:
        """Capture what the camera sees in ``data`` now; it is drawn and handed to
        ``on_frame(token, rgbd)`` on the render thread."""
        self._raise_failure()
        try:
            scene = self._free.get_nowait()
        except queue.Empty:
            self.blocked += 1
            scene = self._take_free_scene()
        assert self.camera is not None  # made before __init__ returns
        self.camera.capture(data, scene)
        self._requests.put((scene, token))

    def drain(self) -> None:
        """Return once every submitted frame has been handed to ``on_frame``."""
        self._requests.join()  # the thread marks every request done, failed ones too
        self._raise_failure()

    def close(self) -> None:
        """Stop the thread after the frames already submitted; frees the GL context."""
        if self._thread.is_alive():
            self._requests.put(None)
            self._thread.join()

    # -- internals ----------------------------------------------------------------------------

    def _take_free_scene(self) -> mujoco.MjvScene:
        while True:
            try:
                return self._free.get(timeout=_POLL_S)
            except queue.Empty:
                self._raise_failure()
                if not self._thread.is_alive():
                    raise RenderThreadError("the render thread is not running") from None

    def _raise_failure(self) -> None:
        if self._failure is not None:
            raise RenderThreadError(f"rendering failed: {self._failure!r}") from self._failure

    def _run(self, model: mujoco.MjModel, width: int, height: int, pending: int) -> None:
        try:
            # Created here: the GL context is made current on this thread and stays here.
            camera = self.camera = KinectCamera(model, width, height)
            for _ in range(pending):
                self._free.put(camera.new_scene())
        except BaseException as exc:  # reported by __init__
            self._failure = exc
            self._ready.set()
            return
        self._ready.set()
        try:
            while True:
                request = self._requests.get()
                try:
                    if request is None:
                        return
                    self._draw(camera, *request)
                finally:
                    self._requests.task_done()
        finally:
            camera.close()

    def _draw(self, camera: KinectCamera, scene: mujoco.MjvScene, token: object) -> None:
        start = time.perf_counter()
        try:
            if self._failure is not None:
                return  # stopped: the loop learns it at its next submit / drain
            rgbd = camera.draw(scene)
        except Exception as exc:
            self._failure = exc
            return
        finally:
            self._free.put(scene)
        try:
            self._on_frame(token, rgbd)
        except Exception as exc:
            self._failure = exc
            return
        self.frames += 1
        self.frame_ms.add((time.perf_counter() - start) * 1e3)
