"""RenderThread: frames drawn off the loop equal the synchronous render, in order."""

import threading

import numpy as np
import pytest

from diffusion_policy_ros.sim.render_thread import RenderThread, RenderThreadError
from diffusion_policy_ros.sim.runtime import SimulationRuntime, load_tracker_config
from diffusion_policy_ros.sim.sim_config import SimConfig

EFFORT = np.array([0.5, -0.3, 0.2, 0.1, 0.1, 0.1])


@pytest.fixture
def runtime():
    rt = SimulationRuntime(SimConfig(resolution=[160, 90]), load_tracker_config())
    rt.reset(seed=5000)
    yield rt
    rt.close()


def test_frames_equal_the_synchronous_render_in_submission_order(runtime):
    drawn = []
    render = RenderThread(runtime.scene.model, 160, 90, lambda token, f: drawn.append((token, f)))
    try:
        expected = []
        for k in range(6):
            runtime.step(EFFORT, 0.03)  # the arm moves between frames
            for _ in range(8):
                runtime.step(EFFORT, 0.03)
            render.submit(runtime.scene.data, k)
            expected.append(runtime.camera.render_arrays(runtime.scene.data))
        render.drain()
        assert [token for token, _ in drawn] == list(range(6))
        for (_, got), want in zip(drawn, expected, strict=True):
            assert np.array_equal(got.rgb, want.rgb)
            assert np.array_equal(got.depth_m, want.depth_m)
        assert not np.array_equal(drawn[0][1].rgb, drawn[-1][1].rgb)
        assert render.frames == 6 and len(render.frame_ms) == 6
    finally:
        render.close()


def test_a_slow_consumer_blocks_submit_instead_of_dropping_frames(runtime):
    in_consumer, release = threading.Event(), threading.Event()
    drawn = []

    def on_frame(token, frame):
        in_consumer.set()
        release.wait(10.0)
        drawn.append(token)

    render = RenderThread(runtime.scene.model, 160, 90, on_frame, pending=1)
    try:
        render.submit(runtime.scene.data, 0)
        assert in_consumer.wait(10.0)  # frame 0 drawn, its scene free again, consumer held
        render.submit(runtime.scene.data, 1)  # captured into the only scene, waits
        assert render.blocked == 0
        threading.Timer(0.3, release.set).start()
        render.submit(runtime.scene.data, 2)  # no scene free until frame 1 is drawn
        render.drain()
        assert drawn == [0, 1, 2] and render.blocked == 1
    finally:
        release.set()
        render.close()


def test_a_failure_on_the_thread_is_raised_to_the_loop(runtime):
    def on_frame(token, frame):
        raise ValueError(f"cannot publish frame {token}")

    render = RenderThread(runtime.scene.model, 160, 90, on_frame)
    try:
        render.submit(runtime.scene.data, 7)
        with pytest.raises(RenderThreadError, match="cannot publish frame 7"):
            render.drain()
        with pytest.raises(RenderThreadError):
            render.submit(runtime.scene.data, 8)
    finally:
        render.close()


def test_bad_settings_are_refused(runtime):
    with pytest.raises(ValueError, match="pending"):
        RenderThread(runtime.scene.model, 160, 90, lambda token, f: None, pending=0)
    with pytest.raises(RenderThreadError, match="camera set-up failed"):
        RenderThread(runtime.scene.model, 4000, 90, lambda token, f: None)
