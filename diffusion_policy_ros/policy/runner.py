"""``PolicyRunner``: numpy observations in, a numpy action chunk out, on one device.

This is the inference surface ``policy_node`` and the offline tools use. It
holds the model on its device in eval mode, the autocast precision, the
instruction-embedding cache and the per-stage timer, and converts the plain
observation dicts that ``rgbd_sync_node`` / ``GraspEnv`` produce into a
batch of one.

Observation dict (one frame; ``predict`` takes To of them, oldest first):
``image`` (H, W, 3) uint8 RGB, ``points`` (N, 3) float32 in base_link (m),
``point_colors`` (N, 3) uint8 RGB, ``joint_positions`` (D,) (rad, gripper m).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import torch

from diffusion_policy_ros.policy.checkpoint import load_checkpoint
from diffusion_policy_ros.policy.devices import (
    autocast_context,
    device_synchronizer,
    resolve_device,
)
from diffusion_policy_ros.policy.features import IMAGE, LANGUAGE, POINTS_RGB, POINTS_XYZ, STATE
from diffusion_policy_ros.policy.frame_cache import FrameFeatureCache
from diffusion_policy_ros.policy.language import LanguageEmbedder
from diffusion_policy_ros.policy.modeling_diffusion import DiffusionPolicy
from diffusion_policy_ros.policy.runtime_backends import (
    BACKENDS,
    AotInductorBackend,
    BackendError,
    OnnxRuntimeBackend,
    TorchBackend,
)
from diffusion_policy_ros.policy.timing import StageTimer

Observation = Mapping[str, np.ndarray]

ONNX_SUBDIR = "onnx"
AOT_SUBDIR = "aot"
GRAPH_SUBDIRS = {"onnxruntime": ONNX_SUBDIR, "aotinductor": AOT_SUBDIR}
"""Where ``dpr export`` puts a checkpoint's graphs for each backend by default."""


def default_graph_dir(checkpoint: str | Path, backend: str, threads: int) -> Path:
    """``CHECKPOINT/onnx``, or ``CHECKPOINT/aot/threads_N`` for AOTInductor packages
    compiled for N intra-op threads: Inductor fixes the thread count of its generated
    loops at compile time, and a package run at another count is several times slower
    (docs/explanation/distillation.md), so each count has its own packages."""
    base = Path(checkpoint) / GRAPH_SUBDIRS[backend]
    return base / f"threads_{threads}" if backend == "aotinductor" else base


def synthetic_observation(policy: DiffusionPolicy, rng: np.random.Generator) -> dict:
    """A random observation of the right shapes (warm-up, benchmarks)."""
    c = policy.config
    h, w = c.image_size
    lo = policy.normalizer.stats()[POINTS_XYZ]
    xyz = rng.uniform(lo["min"].cpu().numpy(), lo["max"].cpu().numpy(), (c.num_points, 3))
    return {"image": rng.integers(0, 256, (h, w, 3), dtype=np.uint8),
            "points": xyz.astype(np.float32),
            "point_colors": rng.integers(0, 256, (c.num_points, 3), dtype=np.uint8),
            "joint_positions": rng.uniform(-1.0, 1.0, c.state_dim).astype(np.float32)}


class PolicyRunner:
    """Runs a ``DiffusionPolicy`` on ``device`` (auto | cpu | cuda | npu) at ``precision``.

    ``num_threads`` sets torch's intra-op threads for the whole process (None:
    leave as is). Measured on the 2-core machine: two threads make a DDIM-10
    chunk only a little faster than one while the machine is idle, but with two
    threads steps stall whenever another process (the 500 Hz tracker, a camera
    node) holds a core; one thread degrades gracefully (figures in
    docs/explanation/benchmarks.md, "Measurements behind the code's design").
    """

    def __init__(self, policy: DiffusionPolicy, *, device: str = "auto",
                 precision: str = "fp32", language: LanguageEmbedder | None = None,
                 num_inference_steps: int | None = None, num_samples: int | None = None,
                 num_threads: int | None = None, backend: str = "torch",
                 graph_dir: str | Path | None = None, weights_sha256: str | None = None):
        """``backend``: torch (eager, any device) | onnxruntime | aotinductor (the graphs
        ``dpr export`` wrote into ``graph_dir``, CPU, fp32; checked against
        ``weights_sha256``)."""
        if backend not in BACKENDS:
            raise BackendError(f"backend {backend!r}: expected one of {', '.join(BACKENDS)}")
        self.device = resolve_device(device)
        self.precision = precision
        autocast_context(self.device, precision)  # fails now, not on the first chunk
        if num_threads is not None:
            torch.set_num_threads(num_threads)
        self.policy = policy.to(self.device).eval()
        self.config = policy.config
        self.language = language or LanguageEmbedder(self.config.language_model)
        if self.language.model_name != self.config.language_model:
            raise ValueError(f"policy was trained with {self.config.language_model!r} "
                             f"embeddings, the embedder gives {self.language.model_name!r}")
        self.num_inference_steps = num_inference_steps or self.config.num_inference_steps
        self.num_samples = num_samples or self.config.num_samples
        self.timer = StageTimer(device_synchronizer(self.device))
        self.frame_cache = FrameFeatureCache(2 * self.config.n_obs_steps)
        if backend != "torch":
            if self.device.type != "cpu" or precision != "fp32":
                raise BackendError(f"backend {backend!r} runs on the CPU in fp32, asked for "
                                   f"{self.device.type} / {precision}: use backend 'torch'")
            if graph_dir is None:
                raise BackendError(f"backend {backend!r} needs the exported graphs' "
                                   f"directory (dpr export)")
        self.backend: TorchBackend | OnnxRuntimeBackend | AotInductorBackend
        if backend == "aotinductor":
            assert graph_dir is not None  # checked above
            self.backend = AotInductorBackend(graph_dir, weights_sha256,
                                              self.num_inference_steps, self.num_samples,
                                              self.config.chunk_lowpass_terms,
                                              threads=torch.get_num_threads())
        elif backend == "onnxruntime":
            assert graph_dir is not None  # checked above
            self.backend = OnnxRuntimeBackend(graph_dir, weights_sha256, self.num_inference_steps,
                                              self.num_samples, num_threads,
                                              self.config.chunk_lowpass_terms)
        else:
            self.backend = TorchBackend(self.policy)

    @classmethod
    def from_checkpoint(cls, directory: str | Path, *, joint_names: Sequence[str] | None = None,
                        **kwargs) -> PolicyRunner:
        """Load a checkpoint (checked against ``joint_names`` when given) into a runner;
        a static-graph backend reads ``default_graph_dir`` (for the thread count the
        runner will run with) unless ``graph_dir`` is given."""
        policy, metadata = load_checkpoint(directory, joint_names=joint_names)
        backend = kwargs.get("backend", "torch")
        if backend in GRAPH_SUBDIRS and not kwargs.get("graph_dir"):
            threads = kwargs.get("num_threads") or torch.get_num_threads()
            kwargs["graph_dir"] = default_graph_dir(directory, backend, threads)
        return cls(policy, weights_sha256=metadata.get("weights_sha256"), **kwargs)

    def _check(self, observations: Sequence[Observation]) -> None:
        c = self.config
        if len(observations) != c.n_obs_steps:
            raise ValueError(f"expected {c.n_obs_steps} observations (oldest first), got "
                             f"{len(observations)}")
        frames = {"image": (*c.image_size, 3), "points": (c.num_points, 3),
                  "point_colors": (c.num_points, 3), "joint_positions": (c.state_dim,)}
        for i, obs in enumerate(observations):
            for key, shape in frames.items():
                if key not in obs:
                    raise ValueError(f"observation {i} lacks '{key}'")
                if np.shape(obs[key]) != shape:
                    raise ValueError(f"observation {i} '{key}' has shape {np.shape(obs[key])}, "
                                     f"expected {shape}")

    def observation_batch(self, observations: Sequence[Observation],
                          embedding: np.ndarray) -> dict[str, torch.Tensor]:
        """The To observations + instruction embedding as a batch of one
        (``policy.features`` keys), for callers of the model's own methods."""
        self._check(observations)
        return {IMAGE: self._stack(observations, "image", np.uint8).permute(0, 1, 4, 2, 3),
                POINTS_XYZ: self._stack(observations, "points", np.float32),
                POINTS_RGB: self._stack(observations, "point_colors", np.uint8),
                STATE: self._stack(observations, "joint_positions", np.float32),
                LANGUAGE: torch.from_numpy(embedding)[None].to(self.device)}

    def _stack(self, observations: Sequence[Observation], key: str,
               dtype: npt.DTypeLike) -> torch.Tensor:
        """(1, len(observations), ...) tensor of one observation entry on the device."""
        array = np.stack([np.asarray(obs[key], dtype=dtype) for obs in observations])
        return torch.from_numpy(array)[None].to(self.device, non_blocking=True)

    def noise_stream(self, seed: int) -> torch.Generator:
        """A seeded source of initial noise for successive ``predict`` calls: each chunk
        starts from new noise, and the sequence repeats for the same seed.

        New noise per chunk matters in closed loop: with the same noise every chunk,
        sampling is a deterministic function of the observation, so a state where the
        policy commands "stay" (e.g. hovering over the object) returns the same chunk
        forever (docs/explanation/policy.md, "Why new noise for every chunk")."""
        return torch.Generator(device=self.device).manual_seed(seed)

    def predict(self, observations: Sequence[Observation], instruction: str,
                noise: int | torch.Generator | torch.Tensor | None = None) -> np.ndarray:
        """(T, D) float64 joint targets; row k is for observation stamp + k * action_dt_s.

        ``noise``: an int fixes this call's initial noise (the sampler is then
        deterministic); a generator from ``noise_stream`` draws the next noise of its
        sequence; a tensor is the draws themselves, shaped as ``policy.initial_noise``
        makes them (S, K, T, D) on any device, so one chunk can be reproduced on another
        device, whose generators draw other numbers; None draws from torch's global
        generator. Stage durations of this call
        are in ``last_timings_ms``. A frame seen in an earlier call (the same ``image``
        array; the same ``points`` and ``point_colors`` arrays and instruction) is not
        encoded again (``FrameFeatureCache``), nor an image ``encode_image_ahead`` took.
        """
        self.timer.reset()
        with self.timer.stage("total"):
            with self.timer.stage("language"):
                embedding = self.language.embed(instruction)
            self._check(observations)
            state = self._stack(observations, "joint_positions", np.float32)
            language = torch.from_numpy(embedding)[None].to(self.device)
            with torch.inference_mode(), autocast_context(self.device, self.precision):
                frames = self._frame_features(observations, instruction, language)
                noises = self._initial_noise(noise)
                chunk = self.backend.chunk(frames, language, state, noises,
                                           self.num_inference_steps, self.num_samples,
                                           self.timer)
            return chunk[0].float().cpu().numpy().astype(np.float64)

    def _initial_noise(self, noise: int | torch.Generator | torch.Tensor | None
                       ) -> torch.Tensor:
        if isinstance(noise, torch.Tensor):
            expected = (self.policy.noise_draws(self.num_inference_steps), self.num_samples,
                        self.config.horizon, self.config.action_dim)
            if tuple(noise.shape) != expected:
                raise ValueError(f"noise tensor of shape {tuple(noise.shape)}, expected "
                                 f"{expected} (draws, samples, horizon, action dim)")
            return noise.to(self.device, torch.float32)
        generator = self.noise_stream(noise) if isinstance(noise, int) else noise
        return self.policy.initial_noise(self.num_samples, self.num_inference_steps,
                                         generator, self.device)

    def _frame_features(self, observations: Sequence[Observation], instruction: str,
                        language: torch.Tensor) -> dict[str, torch.Tensor]:
        """(1, To, ...) per-frame features, encoding only the halves not in the cache."""
        per_frame = []
        for obs in observations:
            image = self.frame_cache.image(obs)
            if image is None:
                image = self._encode_image(obs["image"], self.timer)
            cloud = self.frame_cache.cloud(obs, instruction)
            if cloud is None:
                cloud = self.backend.encode_cloud(self._stack([obs], "points", np.float32)[:, 0],
                                                  self._stack([obs], "point_colors",
                                                              np.uint8)[:, 0],
                                                  language, self.timer)
                self.frame_cache.put_cloud(obs, instruction, cloud)
            per_frame.append({**image, **cloud})
        return {key: torch.stack([f[key] for f in per_frame], dim=1) for key in per_frame[0]}

    def _encode_image(self, image: np.ndarray,
                      timer: StageTimer | None) -> dict[str, torch.Tensor]:
        batch = self._stack([{"image": image}], "image", np.uint8)[:, 0]
        features = self.backend.encode_image(batch.permute(0, 3, 1, 2), timer)
        self.frame_cache.put_image(image, features)
        return features

    def encode_image_ahead(self, image: np.ndarray) -> bool:
        """Encode a frame's (H, W, 3) uint8 RGB image now, before its cloud has arrived,
        so that the chunk this frame starts runs only the cloud encoder and the head.
        ``image`` must be the array the observation history will hand to ``predict``
        (the cache knows it by identity). False when it was encoded already. Not
        thread-safe: call it on the thread that calls ``predict``."""
        if self.frame_cache.has_image(image):
            return False
        with torch.inference_mode(), autocast_context(self.device, self.precision):
            self._encode_image(image, None)
        return True

    @property
    def last_timings_ms(self) -> dict[str, float]:
        """Median ms per stage of the last ``predict`` (``denoiser_step``: one of the steps)."""
        return self.timer.summary_ms()

    def warmup(self, instruction: str, iterations: int = 3, seed: int = 0) -> None:
        """Load the language model, embed ``instruction`` and run a few chunks.

        The first calls pay one-off costs (allocator growth, oneDNN / cuDNN
        kernel selection, autocast weight casts) that would otherwise land on
        the first real chunk.
        """
        rng = np.random.default_rng(seed)
        history = [synthetic_observation(self.policy, rng) for _ in range(self.config.n_obs_steps)]
        for i in range(iterations):
            self.predict(history, instruction, noise=seed + i)
