"""Random pushes on the arm while the expert approaches, so demonstrations show recoveries.

A policy trained only on the expert's clean paths has never seen the arm off
them; its own small errors take it there and nothing in the data says how to
come back (the covariate shift that DART, Laskey et al. 2017, fixes by
perturbing the demonstrator). ``ArmPushes`` is that perturbation as physics:
smooth joint-torque pulses (``qfrc_applied``) that displace the arm by about
``displacement_rad`` against the tracker's PD. The expert replans from the
measured joints every chunk as always, so the recorded chunks, which are
still exactly what the robot was commanded, are its corrections from the
displaced states.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np


@dataclasses.dataclass(frozen=True)
class PushConfig:
    """Size and timing of the pushes (``dpr collect --pushes``)."""

    displacement_rad: tuple[float, ...] = (0.04, 0.04, 0.04, 0.06, 0.06, 0.06)
    """Standard deviation per arm joint of a push's peak, as the static displacement it
    causes against the tracker's stiffness: peak torque = kp * displacement (rad)."""
    duration_s: tuple[float, float] = (0.3, 1.0)
    """Range of one pulse's length; raised-cosine profile, so it starts and ends at 0 (s)."""
    gap_s: tuple[float, float] = (0.3, 2.0)
    """Range of the pause before each pulse (s)."""
    max_pushes: int = 3
    """Pulses per episode at most: the expert cannot finish its approach while pushed."""

    def __post_init__(self):
        if len(self.displacement_rad) != 6 or min(self.displacement_rad) < 0:
            raise ValueError(f"displacement_rad needs 6 values >= 0, got {self.displacement_rad}")
        for name in ("duration_s", "gap_s"):
            lo, hi = getattr(self, name)
            if not 0 <= lo <= hi or (name == "duration_s" and hi <= 0):
                raise ValueError(f"{name} must be an increasing range >= 0, got {(lo, hi)}")
        if self.max_pushes < 0:
            raise ValueError(f"max_pushes must be >= 0, got {self.max_pushes}")


class ArmPushes:
    """Seeded schedule of torque pulses; ``torque_nm(t, active)`` per physics step.

    A pulse starts only while ``active`` (the expert's approach phases) and is
    cut when that ends, so the grasp itself and the lift are never pushed.
    """

    def __init__(self, config: PushConfig, kp_nm_per_rad, seed: int | Sequence[int],
                 start_s: float = 0.0):
        self.config = config
        kp = np.asarray(kp_nm_per_rad, dtype=np.float64).reshape(-1)
        if kp.shape != (6,):
            raise ValueError(f"expected 6 stiffnesses, got {kp.shape[0]}")
        self._peak_scale_nm = kp * np.asarray(config.displacement_rad)
        self._rng = np.random.default_rng(seed)
        self._pulse: tuple[float, float, np.ndarray] | None = None  # start, length, peak
        self._next_start_s = start_s + self._rng.uniform(*config.gap_s)
        #: Pulses started so far.
        self.count = 0
        #: Largest peak torque so far, per joint (N m).
        self.max_peak_nm = np.zeros(6)

    def torque_nm(self, time_s: float, active: bool) -> np.ndarray:
        """(6,) joint torques to apply at ``time_s`` (N m)."""
        if self._pulse is not None:
            start, length, peak = self._pulse
            if active and time_s < start + length:
                return peak * 0.5 * (1.0 - math.cos(2.0 * math.pi * (time_s - start) / length))
            self._pulse = None
            self._next_start_s = time_s + self._rng.uniform(*self.config.gap_s)
        elif active and time_s >= self._next_start_s and self.count < self.config.max_pushes:
            peak = self._peak_scale_nm * self._rng.standard_normal(6)
            self._pulse = (time_s, self._rng.uniform(*self.config.duration_s), peak)
            self.count += 1
            self.max_peak_nm = np.maximum(self.max_peak_nm, np.abs(peak))
        return np.zeros(6)
