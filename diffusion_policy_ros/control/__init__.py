"""PD trajectory tracking core (no rclpy): chunk timeline, interpolation, blending, limits, PD.

``PdTracker`` is what ``pd_tracker_node`` wraps; the blend strategies are in
``timeline``. Their offline comparison (the measurement behind the default blend
strategy) and the tick timing live in ``diffusion_policy_ros.bench`` (``blending``,
``tracker_tick``).
"""

from diffusion_policy_ros.control.chunk import (
    ActionChunk,
    ChunkRejected,
    RejectReason,
    ValidChunk,
    validate_chunk,
)
from diffusion_policy_ros.control.limits import GripperRateLimiter, ReferenceLimiter
from diffusion_policy_ros.control.pd import pd_effort
from diffusion_policy_ros.control.pd_tracker import PdTracker, TrackerCommand, TrackerMode
from diffusion_policy_ros.control.timeline import (
    ActionChunkTimeline,
    ChunkDecision,
    ReferenceState,
)
from diffusion_policy_ros.control.tracker_config import BLEND_STRATEGIES, PdTrackerConfig

__all__ = [
    "BLEND_STRATEGIES",
    "ActionChunk",
    "ActionChunkTimeline",
    "ChunkDecision",
    "ChunkRejected",
    "GripperRateLimiter",
    "PdTracker",
    "PdTrackerConfig",
    "ReferenceLimiter",
    "ReferenceState",
    "RejectReason",
    "TrackerCommand",
    "TrackerMode",
    "ValidChunk",
    "pd_effort",
    "validate_chunk",
]
