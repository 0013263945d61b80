"""``DiffusionPolicy``: multimodal encoders + cross-modal fusion + denoiser + normaliser.

Training (``compute_loss``): DDPM noise at a uniformly drawn step, the
denoiser predicts the noise (``prediction_type = epsilon``) or the clean
chunk (``sample``) from the noisy chunk, the step and the fused observation
condition; mean squared error in fp32. With ``grasp_aux_weight`` > 0 an
auxiliary head also predicts, from the condition alone, the joint state at
which the demonstration closed its gripper (label: ``dataset.grasp_state``),
weighted into the same loss. With ``target_aux_weight`` > 0 the grounding's target
centre (x, y) of the newest frame is pulled to the tool position at that grasp
(label: ``dataset.grasp_position``), on frames where the tool is still away from it.

Inference (``predict_action_chunk``): encode the observation once, then run
DDIM from Gaussian noise for ``num_inference_steps`` denoiser calls and map
the normalised chunk back to joint units. With ``relative_actions`` the
denoiser models the chunk minus the newest measured joint state, which is
added back here: replanning at 10 Hz executes mostly a chunk's first points,
and an absolute chunk's first point carries the network's whole fit error
(measured on held-out demonstration frames, where the demonstrations have none;
docs/explanation/benchmarks.md, "Measurements behind the code's design") as a command
offset. Call ``eval()`` first: in training mode the RGB encoder crops at random.

Prediction type: epsilon, the choice of Chi et al.'s released U-Net and
transformer policies, which train with this same 100-step squared-cosine DDPM
schedule and sample with DDIM; the target has unit variance at every step, so
one loss weighting fits all noise levels. Its known weakness, a poor
clean-chunk estimate at the noisiest steps, is bounded by ``clip_sample``
since normalised actions live in [-1, 1]. ``sample`` stays selectable (for
instance for a consistency-distilled student, which outputs clean chunks).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

from diffusion_policy_ros.policy.activations import Mish
from diffusion_policy_ros.policy.chunk_smoothing import lowpass_projection, smooth_arm_paths
from diffusion_policy_ros.policy.configuration_diffusion import DiffusionPolicyConfig
from diffusion_policy_ros.policy.consistency import ConsistencySchedule, consistency_sample
from diffusion_policy_ros.policy.dit import DiffusionTransformer
from diffusion_policy_ros.policy.features import (
    ACTION,
    GRASP_APPROACH,
    GRASP_LABEL_WEIGHT,
    GRASP_POSITION,
    GRASP_STATE,
    IMAGE,
    LANGUAGE,
    OBSERVATION_KEYS,
    POINTS_RGB,
    POINTS_XYZ,
    STATE,
)
from diffusion_policy_ros.policy.fusion import CrossModalFusion
from diffusion_policy_ros.policy.grounding import LanguagePointGrounding
from diffusion_policy_ros.policy.kinematics import SerialChainKinematics
from diffusion_policy_ros.policy.normalizer import MinMaxNormalizer
from diffusion_policy_ros.policy.pointnet import PointNetEncoder
from diffusion_policy_ros.policy.proprio import ProprioEncoder
from diffusion_policy_ros.policy.schedulers import (
    make_sampling_scheduler,
    make_training_scheduler,
)
from diffusion_policy_ros.policy.timing import StageTimer, timed
from diffusion_policy_ros.policy.tool_target import ToolTargetEncoder
from diffusion_policy_ros.policy.unet1d import FilmUnet1d
from diffusion_policy_ros.policy.vision import RgbEncoder

Batch = Mapping[str, torch.Tensor]


def make_denoiser(config: DiffusionPolicyConfig) -> nn.Module:
    if config.denoiser == "unet":
        return FilmUnet1d(config.action_dim, config.cond_dim, base_dim=config.unet_base_dim,
                          levels=config.unet_levels, kernel_size=config.unet_kernel_size,
                          groups=config.norm_groups, timestep_dim=config.timestep_embed_dim)
    return DiffusionTransformer(config.action_dim, config.cond_dim, config.horizon,
                                width=config.dit_width, heads=config.dit_heads,
                                mlp_ratio=config.dit_mlp_ratio, layers=config.kept_layers,
                                timestep_dim=config.timestep_embed_dim)


def _unit_float(x: torch.Tensor) -> torch.Tensor:
    """uint8 colours -> float in [0, 1]; float input is taken as already in [0, 1]."""
    return x.float() / 255.0 if x.dtype == torch.uint8 else x.float()


def _weighted_mean(values: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Mean of ``values`` (B,) over the weighted samples (0 when every weight is 0)."""
    return (values * weight).sum() / weight.sum().clamp_min(1.0)


class DiffusionPolicy(nn.Module):
    """Language-conditioned multimodal diffusion policy; batch keys in ``policy.features``.

    The normaliser starts as the identity on [-1, 1]: set the dataset's
    statistics (``normalizer.set_stats``, ``normalizer.min_max_stats``) before
    training; checkpoints carry them from then on.
    """

    chunk_lowpass: torch.Tensor | None  # a buffer

    def __init__(self, config: DiffusionPolicyConfig):
        super().__init__()
        config.validate()
        self.config = config
        c = config
        self.normalizer = MinMaxNormalizer({ACTION: c.action_dim, STATE: c.state_dim,
                                            POINTS_XYZ: 3})
        self.rgb_encoder = RgbEncoder(tuple(c.image_crop_size), c.image_base_channels,
                                      c.image_stages, c.image_token_grid, c.norm_groups)
        self.point_encoder = PointNetEncoder(
            c.point_feature_dim, c.point_tokens, c.point_use_rgb,
            condition_dim=c.language_dim if c.point_language_film else 0)
        self.proprio_encoder = ProprioEncoder(c.n_obs_steps, c.state_dim, c.fusion_dim)
        self.fusion = CrossModalFusion(
            n_obs_steps=c.n_obs_steps, image_dim=self.rgb_encoder.out_channels,
            image_cells=c.image_token_grid ** 2, point_dim=c.point_feature_dim,
            language_dim=c.language_dim, dim=c.fusion_dim, layers=c.fusion_layers,
            heads=c.fusion_heads, cond_dim=c.cond_dim)
        # Where the named object is (centre + shape feature of every frame), added to the
        # condition through a projection that starts at zero.
        self.grounding = (LanguagePointGrounding(c.language_dim, c.grounding_dim,
                                                 c.grounding_dim)
                          if c.target_grounding else None)
        if self.grounding is not None:
            self.target_proj = nn.Linear(c.n_obs_steps * self.grounding.out_dim, c.cond_dim)
            nn.init.zeros_(self.target_proj.weight)
            nn.init.zeros_(self.target_proj.bias)
        # The target relative to the tool; the arm's kinematics are buffers that training
        # sets from the arm model (``sim.ik.tool_chain``) and checkpoints carry.
        self.kinematics = (SerialChainKinematics(c.action_dim - 1)
                           if c.tool_relative_target else None)
        self.tool_target = (ToolTargetEncoder(c.n_obs_steps, c.cond_dim, c.tool_target_bands)
                            if c.tool_relative_target else None)
        self.denoiser = make_denoiser(c)
        # Auxiliary head (training only): where the demonstration grasped, in joint space.
        # It hands the encoders a direct gradient towards finding the named object, which
        # the denoising loss alone gives only faintly: after 2.9k steps without it the first
        # chunk of an episode did not depend on the scene or the instruction at all.
        self.grasp_head = (nn.Sequential(nn.Linear(c.cond_dim, c.cond_dim), Mish(),
                                         nn.Linear(c.cond_dim, c.state_dim))
                           if c.grasp_aux_weight > 0 else None)
        self.training_scheduler = make_training_scheduler(c)
        self.sampling_scheduler = make_sampling_scheduler(c)
        self.consistency_schedule = ConsistencySchedule(c)
        # Derived from the config, not learnt: not in the state dict.
        self.register_buffer("chunk_lowpass", lowpass_projection(c.horizon, c.chunk_lowpass_terms)
                             if c.chunk_lowpass_terms else None, persistent=False)

    def parameter_counts(self) -> dict[str, int]:
        parts = ("rgb_encoder", "point_encoder", "grounding", "target_proj", "tool_target",
                 "proprio_encoder", "fusion", "denoiser", "grasp_head")
        counts = {p: sum(w.numel() for w in getattr(self, p).parameters()) for p in parts
                  if getattr(self, p, None) is not None}
        counts["total"] = sum(counts.values())
        return counts

    def check_observation(self, batch: Batch) -> None:
        """Raise ``ValueError`` naming the first observation entry of the wrong shape."""
        missing = [key for key in OBSERVATION_KEYS if key not in batch]
        if missing:
            raise ValueError(f"observation batch lacks {missing}")
        c = self.config
        b = batch[STATE].shape[0]
        to = c.n_obs_steps
        expected = {IMAGE: (b, to, 3, *c.image_size), POINTS_XYZ: (b, to, c.num_points, 3),
                    POINTS_RGB: (b, to, c.num_points, 3), STATE: (b, to, c.state_dim),
                    LANGUAGE: (b, c.language_dim)}
        for key, shape in expected.items():
            if tuple(batch[key].shape) != shape:
                raise ValueError(f"'{key}' has shape {tuple(batch[key].shape)}, expected {shape}")

    def encode_observation(self, batch: Batch, timer: StageTimer | None = None) -> torch.Tensor:
        """Observation history + instruction embedding -> (B, cond_dim) condition."""
        return self.encode_with_target(batch, timer)[0]

    def encode_with_target(self, batch: Batch,
                timer: StageTimer | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(condition, (B, To, 3) grounded target centres in normalised coordinates or None)."""
        self.check_observation(batch)
        b, to = batch[STATE].shape[:2]
        language = batch[LANGUAGE].float()
        frames = self.encode_frames(batch[IMAGE].flatten(0, 1), batch[POINTS_XYZ].flatten(0, 1),
                                    batch[POINTS_RGB].flatten(0, 1),
                                    language.repeat_interleave(to, dim=0), timer)
        frames = {key: value.unflatten(0, (b, to)) for key, value in frames.items()}
        return self.condition_from_frames(frames, language, batch[STATE], timer)

    def encode_frames(self, images: torch.Tensor, xyz: torch.Tensor, rgb: torch.Tensor,
                      language: torch.Tensor,
                      timer: StageTimer | None = None) -> dict[str, torch.Tensor]:
        """What depends on one camera frame (and the instruction) alone, for M frames.

        images (M, 3, H, W), xyz (M, N, 3) base_link m, rgb (M, N, 3), language (M, L)
        -> the features ``export.frame_feature_keys`` names, each (M, ...). A frame stays
        in the To history for To chunks; ``PolicyRunner`` keeps these per frame so each
        frame is encoded once.
        """
        return {**self.encode_images(images, timer),
                **self.encode_clouds(xyz, rgb, language, timer)}

    def encode_images(self, images: torch.Tensor,
                      timer: StageTimer | None = None) -> dict[str, torch.Tensor]:
        """The image half of ``encode_frames``: it needs neither the cloud nor the
        instruction, so a node can run it while the frame's cloud is still on its way."""
        with timed(timer, "rgb_encoder"):
            return {"image_tokens": self.rgb_encoder(_unit_float(images))}

    def encode_clouds(self, xyz: torch.Tensor, rgb: torch.Tensor, language: torch.Tensor,
                      timer: StageTimer | None = None) -> dict[str, torch.Tensor]:
        """The cloud half of ``encode_frames``: PointNet tokens and the grounded target."""
        features = {}
        with timed(timer, "point_encoder"):
            xyz = self.normalizer.normalize(POINTS_XYZ, xyz.float())
            rgb = _unit_float(rgb)
            language = language.float()
            features["point_tokens"], features["point_centres"] = self.point_encoder(
                xyz, rgb, language)
        if self.grounding is not None:
            with timed(timer, "grounding"):
                centre, shape, _ = self.grounding(xyz, rgb, language)
                features["target_centre"], features["target_shape"] = centre, shape
        return features

    def condition_from_frames(self, frames: Mapping[str, torch.Tensor], language: torch.Tensor,
                              state: torch.Tensor, timer: StageTimer | None = None
                              ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Per-frame features (B, To, ...) + instruction (B, L) + joint states (B, To, D) ->
        (condition (B, cond_dim), grounded target centres (B, To, 3) or None)."""
        language = language.float()
        with timed(timer, "proprio_encoder"):
            proprio = self.proprio_encoder(self.normalizer.normalize(STATE, state.float()))
        with timed(timer, "fusion"):
            cond = self.fusion(frames["image_tokens"], frames["point_tokens"],
                               frames["point_centres"], language, proprio)
            centre = None
            if self.grounding is not None:
                centre = frames["target_centre"]
                target = torch.cat([centre, frames["target_shape"]], dim=-1)
                cond = cond + self.target_proj(target.flatten(1))
        if self.tool_target is not None:
            with timed(timer, "tool_target"):
                assert self.kinematics is not None  # made with tool_target
                tool = self.normalizer.normalize(POINTS_XYZ, self.kinematics(state))
                cond = cond + self.tool_target(centre, tool)
        return cond, centre

    def compute_loss(self, batch: Batch, noise: torch.Tensor | None = None,
                     steps: torch.Tensor | None = None) -> torch.Tensor:
        """Denoising loss of one batch (observation keys + ``action``), a fp32 scalar.

        ``noise`` (B, T, D) and diffusion ``steps`` (B,) are drawn at random unless
        given (tests comparing data-parallel and single-process gradients give them).
        """
        cond, centre = self.encode_with_target(batch)
        clean = self.normalizer.normalize(ACTION, self.action_offsets(batch, batch[ACTION]))
        if noise is None:
            noise = torch.randn_like(clean)
        if steps is None:
            steps = torch.randint(0, self.config.num_train_timesteps, (clean.shape[0],),
                                  device=clean.device)
        # diffusers annotates IntTensor; any integer tensor works
        noisy = self.training_scheduler.add_noise(clean, noise, steps)  # type: ignore[arg-type]
        prediction = self.denoiser(noisy, steps, cond).float()
        target = noise if self.config.prediction_type == "epsilon" else clean
        loss = F.mse_loss(prediction, target)
        labelled = batch[GRASP_LABEL_WEIGHT].float() if GRASP_LABEL_WEIGHT in batch \
            else torch.ones(clean.shape[0], device=clean.device)
        if self.grasp_head is not None and GRASP_STATE in batch:
            grasp = self.normalizer.normalize(STATE, batch[GRASP_STATE].float())
            error = (self.grasp_head(cond).float() - grasp).square().mean(dim=1)
            loss = loss + self.config.grasp_aux_weight * _weighted_mean(error, labelled)
        if self.config.target_aux_weight > 0 and GRASP_POSITION in batch:
            assert centre is not None  # the config requires target_grounding
            where = self.normalizer.normalize(POINTS_XYZ, batch[GRASP_POSITION].float())
            error = (centre[:, -1, :2].float() - where[:, :2]).square().mean(dim=1)
            weight = batch[GRASP_APPROACH].float() if GRASP_APPROACH in batch \
                else torch.ones_like(error)
            loss = loss + self.config.target_aux_weight * _weighted_mean(error,
                                                                         weight * labelled)
        return loss

    def initial_noise(self, batch: int, num_inference_steps: int | None = None,
                      generator: torch.Generator | None = None,
                      device: torch.device | str = "cpu") -> torch.Tensor:
        """(S, batch, T, D) standard normal draws for ``denoise``: S = 1 for DDIM, one per
        step for consistency sampling (each step after the first re-noises)."""
        c = self.config
        return torch.randn((self.noise_draws(num_inference_steps), batch, c.horizon,
                            c.action_dim), generator=generator, device=device)

    def noise_draws(self, num_inference_steps: int | None = None) -> int:
        """S of ``initial_noise``: normal draws per chunk the sampler consumes."""
        c = self.config
        steps = num_inference_steps or c.num_inference_steps
        return steps if c.sampler == "consistency" else 1

    def denoise(self, cond: torch.Tensor, noises: torch.Tensor,
                num_inference_steps: int | None = None,
                timer: StageTimer | None = None) -> torch.Tensor:
        """From given noise (``initial_noise``) to a normalised (B, T, D) chunk: DDIM
        (eta = 0), or multistep consistency sampling for a distilled student
        (``config.sampler``). Deterministic, so an exported graph can be checked against it."""
        c = self.config
        steps = num_inference_steps or c.num_inference_steps
        if c.sampler == "consistency":
            timesteps = self.consistency_schedule.sampling_timesteps(steps)
            with timed(timer, "denoiser_step"):
                return consistency_sample(self.denoiser, cond, self.consistency_schedule,
                                          noises, timesteps)
        scheduler = self.sampling_scheduler
        scheduler.set_timesteps(steps, device=cond.device)
        x = noises[0] * scheduler.init_noise_sigma
        for t in scheduler.timesteps:
            with timed(timer, "denoiser_step"):
                out = self.denoiser(x, t, cond).float()
                x = scheduler.step(out, t, x, return_dict=False)[0]  # prev_sample
        return x

    @torch.no_grad()
    def sample(self, cond: torch.Tensor, num_inference_steps: int | None = None,
               generator: torch.Generator | None = None,
               timer: StageTimer | None = None) -> torch.Tensor:
        """From N(0, I) to a normalised (B, T, D) chunk (``denoise`` on fresh noise)."""
        noises = self.initial_noise(cond.shape[0], num_inference_steps, generator, cond.device)
        return self.denoise(cond, noises, num_inference_steps, timer)

    @torch.no_grad()
    def predict_action_chunk(self, obs_batch: Batch, num_inference_steps: int | None = None,
                             generator: torch.Generator | None = None,
                             timer: StageTimer | None = None,
                             num_samples: int | None = None) -> torch.Tensor:
        """(B, T, D) joint targets in physical units (rad, gripper m); see
        ``chunk_from_condition`` for ``num_samples``."""
        k = num_samples or self.config.num_samples
        cond = self.encode_observation(obs_batch, timer)
        noises = self.initial_noise(cond.shape[0] * k, num_inference_steps, generator,
                                    cond.device)
        return self.chunk_from_condition(cond, obs_batch[STATE], noises, num_inference_steps,
                                         k, timer)

    def chunk_from_condition(self, cond: torch.Tensor, state: torch.Tensor,
                             noises: torch.Tensor, num_inference_steps: int | None = None,
                             num_samples: int = 1,
                             timer: StageTimer | None = None) -> torch.Tensor:
        """Condition (B, cond_dim) + joint states (B, To, D) + noise (S, B * K, T, D) ->
        (B, T, D) joint targets in physical units.

        With ``num_samples`` K > 1 K chunks are drawn per observation in one batch and
        the medoid is returned: the sample with the least summed L1 distance (normalised
        units) to the others. Single draws scatter, and a persistent noise seed turns a
        stray draw into a bias that lasts the episode (docs/explanation/policy.md, "Why 8
        samples"). The
        medoid stays a real sample, so it never blends two modes (a grasp yaw 90 degrees
        apart) as a mean or median would.
        """
        k = num_samples
        # One observation: its condition is shared by the K samples, not copied K times.
        shared = cond if cond.shape[0] == 1 else cond.repeat_interleave(k, dim=0)
        samples = self.denoise(shared, noises, num_inference_steps, timer)
        if self.chunk_lowpass is not None:
            samples = smooth_arm_paths(samples, self.chunk_lowpass)
        if k > 1:
            samples = samples.unflatten(0, (cond.shape[0], k))
            spread = (samples[:, :, None] - samples[:, None]).abs().sum(dim=(3, 4)).sum(dim=2)
            pick = torch.nn.functional.one_hot(spread.argmin(dim=1), k).to(samples.dtype)
            samples = torch.einsum("bk,bktd->btd", pick, samples)
        return self.to_joint_targets(samples, state)

    def to_joint_targets(self, samples: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        """Normalised (B, T, D) chunks -> joint targets in physical units (rad, gripper m),
        relative to the newest of the joint states (B, To, D) when the policy models offsets."""
        chunk = self.normalizer.unnormalize(ACTION, samples)
        if self.config.relative_actions:
            chunk = chunk + state[:, -1:, :].to(chunk.dtype)
        return chunk

    def action_offsets(self, batch: Batch, actions: torch.Tensor) -> torch.Tensor:
        """What the denoiser models: ``actions`` (B, T, D), minus the newest measured joint
        state with ``relative_actions`` (the chunk's first point is then 0; the offsets'
        range over a 1.6 s chunk is about that of the positions, measured)."""
        actions = actions.float()
        if self.config.relative_actions:
            actions = actions - batch[STATE][:, -1:, :].float()
        return actions
