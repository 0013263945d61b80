"""Shared helpers for the control core tests (pure Python, no ROS)."""

from __future__ import annotations

import pytest

from diffusion_policy_ros.control import ActionChunk, PdTracker, PdTrackerConfig

ARM = ["joint_1", "joint_2", "joint_3", "joint_4", "joint_5", "joint_6"]
NAMES = [*ARM, "gripper_joint"]
RATE = 500.0
H = 1.0 / RATE


def chunk_from(stamp, fn, n=16, dt=0.1, gripper=0.04, names=NAMES):
    """Chunk whose arm joints all follow ``fn(t_abs)`` (scalar or 6-list)."""
    rows = []
    for k in range(n):
        t = stamp + k * dt
        v = fn(t)
        arm = list(v) if isinstance(v, (list, tuple)) else [float(v)] * 6
        g = gripper(t) if callable(gripper) else gripper
        by_name = dict(zip(NAMES, [*arm, g], strict=True))
        rows.append([by_name[name] for name in names])
    return ActionChunk(stamp, list(names), [k * dt for k in range(n)], rows)


class Sim:
    """A tracker ticking at 500 Hz with an ideal plant (the arm sits on the reference)."""

    def __init__(self, config: PdTrackerConfig | None = None, q0=None, gripper0=0.04):
        self.config = config or PdTrackerConfig()
        self.tracker = PdTracker(self.config)
        self.q = list(q0) if q0 is not None else [0.0] * 6
        self.qd = [0.0] * 6
        self.gripper0 = gripper0
        self.now = 0.0
        self.log = []
        self.ideal_plant = True

    def tick(self, stamp=None):
        stamp = self.now if stamp is None else stamp
        cmd = self.tracker.tick(self.now, self.q, self.qd, stamp, self.gripper0)
        if self.ideal_plant and cmd.mode != "fault":
            self.q, self.qd = list(cmd.q_ref), list(cmd.qd_ref)
        self.log.append((self.now, cmd))
        self.now = round(self.now + H, 9)
        return cmd

    def run(self, seconds, chunks=(), **kw):
        """Tick for ``seconds``; ``chunks``: ``[(arrival_s, chunk)]`` submitted when due."""
        pending = sorted(chunks, key=lambda c: c[0])
        out = []
        end = self.now + seconds
        while self.now < end - 1e-9:
            while pending and pending[0][0] <= self.now + 1e-12:
                out.append(self.tracker.submit_chunk(pending.pop(0)[1], self.now))
            self.tick(**kw)
        return out

    def submit(self, chunk):
        return self.tracker.submit_chunk(chunk, self.now)


@pytest.fixture
def sim_factory():
    return Sim


@pytest.fixture
def chunk():
    return chunk_from


@pytest.fixture
def narrow_config():
    """Tight limits so that streams run into them (the reference at the full velocity
    limit: the tests of the reference read velocity_limits as its bound)."""
    return PdTrackerConfig(
        position_lower=[-1.0] * 6, position_upper=[1.0] * 6, position_margin=0.05,
        velocity_limits=[2.0] * 6, velocity_fraction=1.0, acceleration_limits=[10.0] * 6)

