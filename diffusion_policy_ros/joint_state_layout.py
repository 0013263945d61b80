"""A ``sensor_msgs/JointState``'s layout against the joints a component expects: the one
check the policy's history and the tracker both make on every sample."""

from __future__ import annotations

from collections.abc import Sequence


def joint_state_layout(expected: Sequence[str], names: Sequence[str],
                       positions: Sequence[float], velocities: Sequence[float] = ()
                       ) -> tuple[list[int], str]:
    """Index of each ``expected`` joint in ``names``, and '' or why the sample cannot be
    read (a joint missing, arrays of other lengths than ``names``; velocities may be
    empty, as the message allows). Extra joints are fine: a robot publishes them all."""
    index = {n: i for i, n in enumerate(names)}
    missing = [n for n in expected if n not in index]
    if missing:
        return [], f"joint_states lacks {missing}"
    if len(positions) != len(names):
        return [], f"joint_states has {len(names)} names but {len(positions)} positions"
    if velocities and len(velocities) != len(names):
        return [], f"joint_states has {len(names)} names but {len(velocities)} velocities"
    return [index[n] for n in expected], ""
