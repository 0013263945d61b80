"""What ``policy_node`` measures of its chunks, as ``/diagnostics`` values: rates, stage
latencies, observation ages."""

from __future__ import annotations

from collections.abc import Mapping

from diffusion_policy_ros.monitoring import RateMeter, RollingStats

#: Runner stages reported (``PolicyRunner.last_timings_ms`` keys).
STAGES = ("language", "rgb_encoder", "point_encoder", "grounding", "tool_target",
          "image_encoder", "cloud_encoder", "proprio_encoder", "fusion", "denoiser_step",
          "sampler")


class ChunkStatistics:
    """Chunks per second of the node's clock (sim time under use_sim_time) and of the wall
    clock, per-stage milliseconds, and how old a chunk's newest observation was."""

    def __init__(self):
        self.rate = RateMeter()
        self.rate_wall = RateMeter()
        self.stage_ms = {name: RollingStats()
                         for name in (*STAGES, "image_encoder_ahead", "predict", "tick")}
        self.observation_age_ms = RollingStats()
        #: Worst age of a chunk's newest observation when its computation began: what the
        #: max_obs_age_s refusal bounds, measured where it is decided.
        self.observation_age_at_start_ms_max = 0.0
        self.first_chunk_ms: float | None = None
        self.warmup_ms: list[float] = []
        self.images_encoded_ahead = 0

    def loaded(self, warmup_ms: list[float]) -> None:
        """A policy was loaded: its warm-up chunks; its first chunk is still to come."""
        self.warmup_ms = warmup_ms
        self.first_chunk_ms = None

    def image_encoded_ahead(self, ms: float) -> None:
        self.images_encoded_ahead += 1
        self.stage_ms["image_encoder_ahead"].add(ms)

    def chunk(self, predict_ms: float, timings_ms: Mapping[str, float], observation_ns: int,
              started_ns: int, published_ns: int, clock_s: float, wall_s: float) -> None:
        """A chunk published: stamps on the node's clock, ``timings_ms`` per runner stage."""
        self.rate.tick(clock_s)
        self.rate_wall.tick(wall_s)
        if self.first_chunk_ms is None:
            self.first_chunk_ms = predict_ms
        for name, ms in timings_ms.items():
            if name in self.stage_ms:
                self.stage_ms[name].add(ms)
        self.stage_ms["predict"].add(predict_ms)
        self.observation_age_at_start_ms_max = max(self.observation_age_at_start_ms_max,
                                                   (started_ns - observation_ns) * 1e-6)
        self.observation_age_ms.add((published_ns - observation_ns) * 1e-6)

    def values(self, rate_hz: float, wall_s: float) -> dict[str, str]:
        return {
            "chunk_rate_hz": f"{rate_hz:.2f}",
            "chunk_rate_wall_hz": f"{self.rate_wall.rate_hz(wall_s):.2f}",
            "chunks_total": str(self.rate.total),
            "images_encoded_ahead_total": str(self.images_encoded_ahead),
            "first_chunk_ms": (f"{self.first_chunk_ms:.2f}" if self.first_chunk_ms is not None
                               else ""),
            "warmup_ms": ", ".join(f"{w:.1f}" for w in self.warmup_ms),
            **{f"{name}_ms_{q}": f"{stats.percentile(p):.3f}"
               for name, stats in self.stage_ms.items() for q, p in (("p50", 50), ("p99", 99))},
            "observation_age_ms_p50": f"{self.observation_age_ms.percentile(50):.3f}",
            "observation_age_ms_p99": f"{self.observation_age_ms.percentile(99):.3f}",
            "observation_age_at_start_ms_max": f"{self.observation_age_at_start_ms_max:.3f}",
        }
