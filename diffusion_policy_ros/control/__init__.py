"""PD trajectory tracking core (no rclpy): chunk timeline, interpolation, blending, limits, PD.

``PdTracker`` is what ``pd_tracker_node`` wraps; ``compare_blending`` (in
``control.blending``) is the offline measurement behind the default blend
strategy; ``benchmark_tick`` (in ``control.benchmark``) times one tick.
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
