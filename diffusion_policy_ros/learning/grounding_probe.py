"""``dpr probe``: does a checkpoint's first decision depend on the scene and the words?

At the first frame of an episode the arm has not moved, so only the scene and
the instruction say where to go. For held-out episodes (the training split of
``dpr train``: ``split_episodes(n, val_fraction, seed)``) this reports, as medians
of the largest joint error (rad):

- ``first_chunk_end``: the chunk's last point against the recorded chunk's;
- ``first_chunk_end_per_joint``: the same, median per arm joint (the wrist yaw at a
  grasp is multimodal, so the max over joints hides how well joints 1-3 aim);
- ``grounded_centre_xy_m`` (checkpoints with ``target_grounding``): the grounding's
  target centre against the tool position at the demonstration's grasp (x-y, m);
- ``grasp_head`` (checkpoints with ``grasp_aux_weight``): the auxiliary head's
  grasp state against ``dataset.grasp_state``, beside ``grasp_mean`` = always
  predicting the mean grasp state of (up to 50) training episodes (the no-grounding
  bar).

``--train`` probes training episodes instead (memorised vs generalised).
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import torch

from diffusion_policy_ros.learning.dataset import (
    episode_dirs,
    grasp_state,
    split_episodes,
    tool_positions,
)
from diffusion_policy_ros.learning.episode_bag import read_episode
from diffusion_policy_ros.policy.features import POINTS_XYZ, STATE
from diffusion_policy_ros.policy.runner import PolicyRunner


def probe(checkpoint: str, data: str, episodes: int = 20, val_fraction: float = 0.05,
          split_seed: int = 0, train: bool = False, num_threads: int = 2) -> dict:
    runner = PolicyRunner.from_checkpoint(checkpoint, device="cpu", num_threads=num_threads)
    policy = runner.policy
    dirs = episode_dirs(data)
    train_idx, val_idx = split_episodes(len(dirs), val_fraction, split_seed)
    chosen = (train_idx if train else val_idx)[:episodes]
    horizon, dt = policy.config.horizon, policy.config.action_dt_s
    chunk_err, head_err, truths, centre_err = [], [], [], []
    for e in chosen:
        ep = read_episode(dirs[e], horizon=horizon, dt_s=dt)
        if not ep.follows_last_instruction(0):
            continue  # switched instruction: the grasp labels are not frame 0's
        first = dict(image=ep.images[0], points=ep.points[0], point_colors=ep.colors[0],
                     joint_positions=ep.joint_positions[0])
        history = [first] * policy.config.n_obs_steps
        chunk = runner.predict(history, ep.instruction, noise=0)
        chunk_err.append(np.abs(chunk[-1, :6] - ep.actions[0][-1, :6]))
        truth = grasp_state(ep)[:6]
        truths.append(truth)
        with torch.no_grad():
            cond, centre = policy.encode_with_target(runner.observation_batch(history,
                                                        runner.language.embed(ep.instruction)))
            head = policy.grasp_head(cond) if policy.grasp_head is not None else None
        if head is not None:
            pred = policy.normalizer.unnormalize(STATE, head)[0, :6].cpu().numpy()
            head_err.append(np.abs(pred - truth).max())
        if centre is not None:
            where = policy.normalizer.unnormalize(POINTS_XYZ, centre[0, -1]).cpu().numpy()
            centre_err.append(np.linalg.norm(where[:2] - tool_positions([truth])[0, :2]))
    mean = np.mean([grasp_state(read_episode(dirs[e], horizon=horizon, dt_s=dt))[:6]
                    for e in train_idx[:max(episodes, 50)]], axis=0)
    out = {"episodes": len(chosen), "split": "train" if train else "held-out",
           "first_chunk_end_rad": float(np.median(np.max(chunk_err, axis=1))),
           "first_chunk_end_per_joint_rad": np.round(np.median(chunk_err, axis=0), 4).tolist(),
           "grasp_mean_rad": float(np.median(np.abs(np.array(truths) - mean).max(axis=1)))}
    if centre_err:
        out["grounded_centre_xy_m"] = float(np.median(centre_err))
    if head_err:
        out["grasp_head_rad"] = float(np.median(head_err))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dpr probe", description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--data", required=True, help="the episode bags it was trained on")
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--train", action="store_true", help="probe training episodes")
    parser.add_argument("--val-fraction", type=float, default=0.05,
                        help="the training run's TrainConfig.val_fraction (same split)")
    args = parser.parse_args(argv)
    print(json.dumps(probe(args.checkpoint, args.data, args.episodes,
                           val_fraction=args.val_fraction, train=args.train), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
