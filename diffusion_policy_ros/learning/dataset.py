"""Training samples from episode bags: To observation frames + the T-step action chunk.

Sample i of an episode conditions on frames ``i - To + 1 .. i`` (the first
frame repeated before the episode starts, as at the start of a real run) and
targets the action chunk recorded for frame i, under the instruction in force
at frame i (an episode may switch instructions mid-way). Frames are one control
period apart (the collection rate), the spacing ``policy_node`` keeps at run time.
Episodes are split into training and validation as a whole, never by frame.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from diffusion_policy_ros.description import TOOL_LINK, URDF_PATH
from diffusion_policy_ros.learning.augmentation import ColourSwap
from diffusion_policy_ros.learning.episode_bag import JOINT_NAMES, EpisodeRecord, read_episode
from diffusion_policy_ros.policy.configuration_diffusion import DiffusionPolicyConfig
from diffusion_policy_ros.policy.features import (
    ACTION,
    GRASP_APPROACH,
    GRASP_LABEL_WEIGHT,
    GRASP_POSITION,
    GRASP_STATE,
    IMAGE,
    LANGUAGE,
    POINTS_RGB,
    POINTS_XYZ,
    STATE,
)
from diffusion_policy_ros.policy.kinematics import (
    SerialChainKinematics,
    urdf_chain,
    urdf_kinematics,
)
from diffusion_policy_ros.policy.normalizer import min_max_stats


def episode_dirs(data_dir: str | Path) -> list[Path]:
    """The episode bags directly in ``data_dir`` (``failed/`` and partial ones excluded)."""
    dirs = sorted(p for p in Path(data_dir).glob("episode_*") if (p / "metadata.yaml").exists())
    if not dirs:
        raise FileNotFoundError(f"{data_dir}: no episode_* bags")
    return dirs


def dataset_fingerprint(dirs: list[Path]) -> str:
    """Hash of the episode names and bag sizes (which data a checkpoint came from)."""
    digest = hashlib.sha256()
    for d in dirs:
        digest.update(d.name.encode())
        for f in sorted(d.iterdir()):
            digest.update(f"{f.name}:{f.stat().st_size}".encode())
    return digest.hexdigest()[:16]


def load_episodes(dirs: list[Path], config: DiffusionPolicyConfig,
                  progress: bool = True) -> list[EpisodeRecord]:
    return [read_episode(d, horizon=config.horizon, dt_s=config.action_dt_s)
            for d in tqdm(dirs, desc="read bags", unit="ep", disable=not progress)]


def episode_instructions(episodes: list[EpisodeRecord]) -> set[str]:
    """Every instruction the episodes' frames were recorded under."""
    return {ep.instruction for ep in episodes}.union(
        *(ep.frame_instructions for ep in episodes))


def split_episodes(n: int, val_fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """(train, validation) episode indices; at least one validation episode when n > 1."""
    order = np.random.default_rng(seed).permutation(n)
    n_val = min(n - 1, max(1 if n > 1 else 0, round(n * val_fraction)))
    return sorted(order[n_val:].tolist()), sorted(order[:n_val].tolist())


def grasp_index(episode: EpisodeRecord, closed_fraction: float = 0.5) -> int:
    """Frame at which the gripper command first falls below ``closed_fraction`` of its
    opening at the start (the last frame if it never does)."""
    command = episode.actions[:, 0, -1]
    closing = np.flatnonzero(command < closed_fraction * command[0])
    return int(closing[0]) if closing.size else len(episode) - 1


def grasp_state(episode: EpisodeRecord, closed_fraction: float = 0.5) -> np.ndarray:
    """(D,) float32 joint state at ``grasp_index``.

    Label of the auxiliary grasp-pose loss; needs only the recorded commands and
    joint states, so real-robot demonstrations have it too.
    """
    return episode.joint_positions[grasp_index(episode, closed_fraction)].astype(np.float32)


ARM_JOINT_NAMES = JOINT_NAMES[:6]
"""The arm's joints (the recorded joint states' first six values)."""


def arm_chain() -> dict[str, np.ndarray]:
    """The arm's kinematic chain base_link -> ``ARM_JOINT_NAMES`` -> tool centre point, from
    the robot description (``description/arm.urdf``): what a policy's kinematics are set
    to when it trains, and the labels below are computed with."""
    return urdf_chain(URDF_PATH, ARM_JOINT_NAMES, TOOL_LINK)


@functools.cache
def _arm_fk() -> SerialChainKinematics:
    return urdf_kinematics(URDF_PATH, ARM_JOINT_NAMES, TOOL_LINK)


def tool_positions(joint_states) -> np.ndarray:
    """E joint states (>= 6 values, arm joints first) -> (E, 3) float32 tool centre points
    in base_link (m).

    Forward kinematics of the robot description (float64, as the robot's): the label of
    the grounding loss, again only from recorded joints.
    """
    q = np.asarray(joint_states, np.float64)
    if len(q) == 0:
        return np.zeros((0, 3), np.float32)
    return _arm_fk().tool_positions(q[:, :6]).astype(np.float32)


APPROACH_RADIUS_M = 0.05
"""Frames whose tool is farther than this (x-y) from the grasp position train the
grounding (``features.GRASP_APPROACH``)."""


class EpisodeDataset(torch.utils.data.Dataset):
    """Policy batches (keys of ``policy.features``) from in-memory episodes."""

    def __init__(self, episodes: list[EpisodeRecord], config: DiffusionPolicyConfig,
                 embeddings: dict[str, np.ndarray], early_frames: int = 0,
                 early_frame_repeat: int = 1, colour_swap: ColourSwap | None = None,
                 colour_swap_prob: float = 0.0):
        """``early_frames`` / ``early_frame_repeat``: the first frames of every episode
        appear that many times in the index (see ``TrainConfig.early_frames``).
        ``colour_swap``: with probability ``colour_swap_prob`` a sample's object colours
        and instruction are permuted (``augmentation.ColourSwap``); ``embeddings`` must
        then hold every ``instruction_variants`` of the episodes' instructions."""
        self.config = config
        self.episodes = episodes
        self.colour_swap = colour_swap if colour_swap_prob > 0 else None
        self.colour_swap_prob = colour_swap_prob
        texts = episode_instructions(episodes)
        if self.colour_swap is not None:
            texts = set().union(*(self.colour_swap.instruction_variants(t) for t in texts))
        self.embeddings = {t: np.asarray(embeddings[t], np.float32) for t in texts}
        self.index = [(e, i) for e, ep in enumerate(episodes) for i in range(len(ep))]
        self.index += [(e, i) for _ in range(early_frame_repeat - 1)
                       for e, ep in enumerate(episodes) for i in range(min(early_frames, len(ep)))]
        self.grasp_states = [grasp_state(ep) for ep in episodes]
        tools = [tool_positions(ep.joint_positions) for ep in episodes]
        self.grasp_positions = [tool[grasp_index(ep)] for ep, tool in zip(episodes, tools,
                                                                           strict=True)]
        self.approach = [
            (np.linalg.norm(tool[:, :2] - where[:2], axis=1) > APPROACH_RADIUS_M)
            .astype(np.float32)
            for tool, where in zip(tools, self.grasp_positions, strict=True)]

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, k: int) -> dict[str, torch.Tensor]:
        e, i = self.index[k]
        ep = self.episodes[e]
        frames = np.clip(np.arange(i - self.config.n_obs_steps + 1, i + 1), 0, None)
        images, colors, instruction = ep.images[frames], ep.colors[frames], ep.instruction_at(i)
        # Drawn from torch's generator, so torch.manual_seed makes the augmentation repeatable.
        if self.colour_swap is not None and torch.rand(()).item() < self.colour_swap_prob:
            rng = np.random.default_rng(int(torch.randint(0, 2**31 - 1, ()).item()))
            mapping = self.colour_swap.sample(rng)
            images = self.colour_swap.recolour(images, mapping)
            colors = self.colour_swap.recolour(colors, mapping)
            instruction = self.colour_swap.instruction(instruction, mapping)
        return {
            IMAGE: torch.from_numpy(np.ascontiguousarray(images)).permute(0, 3, 1, 2),
            POINTS_XYZ: torch.from_numpy(ep.points[frames]),
            POINTS_RGB: torch.from_numpy(np.ascontiguousarray(colors)),
            STATE: torch.from_numpy(ep.joint_positions[frames].astype(np.float32)),
            LANGUAGE: torch.from_numpy(self.embeddings[instruction]),
            ACTION: torch.from_numpy(ep.actions[i].astype(np.float32)),
            GRASP_STATE: torch.from_numpy(self.grasp_states[e]),
            GRASP_POSITION: torch.from_numpy(self.grasp_positions[e]),
            GRASP_APPROACH: torch.tensor(self.approach[e][i]),
            GRASP_LABEL_WEIGHT: torch.tensor(float(ep.follows_last_instruction(i))),
        }

    def normalizer_stats(self) -> dict[str, dict[str, torch.Tensor]]:
        """Min / max of actions, joint states and point positions over these episodes."""
        def cat(attr: str, dim: int) -> torch.Tensor:
            return torch.from_numpy(np.concatenate(
                [getattr(ep, attr).reshape(-1, dim) for ep in self.episodes]).astype(np.float32))

        d = self.config.action_dim
        actions = cat("actions", d)
        if self.config.relative_actions:  # offsets from the state at each chunk's frame
            states = torch.from_numpy(np.concatenate(
                [np.repeat(ep.joint_positions, ep.actions.shape[1], axis=0)
                 for ep in self.episodes]).astype(np.float32))
            actions = actions - states
        return {ACTION: min_max_stats(actions),
                STATE: min_max_stats(cat("joint_positions", d)),
                POINTS_XYZ: min_max_stats(cat("points", 3))}
