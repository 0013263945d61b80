"""Joint-space PD law with optional feedforward and effort saturation."""

from __future__ import annotations

from collections.abc import Sequence


def pd_effort(q_ref: Sequence[float], qd_ref: Sequence[float], q: Sequence[float],
              qd: Sequence[float], kp: Sequence[float], kd: Sequence[float],
              effort_limits: Sequence[float],
              feedforward: Sequence[float] | None = None) -> tuple[list[float], bool]:
    """``effort = Kp (q_ref - q) + Kd (qd_ref - qd) + feedforward``, saturated to +-limits.

    Returns the efforts (N m) and whether any joint saturated.
    """
    out = []
    saturated = False
    for j in range(len(q_ref)):
        u = kp[j] * (q_ref[j] - q[j]) + kd[j] * (qd_ref[j] - qd[j])
        if feedforward is not None:
            u += feedforward[j]
        lim = effort_limits[j]
        if u > lim:
            u = lim
            saturated = True
        elif u < -lim:
            u = -lim
            saturated = True
        out.append(u)
    return out, saturated
