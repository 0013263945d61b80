"""dpr train: a tiny policy learns from collected bags; checkpoints resume exactly."""

import json
from pathlib import Path

import pytest
import torch
from PIL import Image

from diffusion_policy_ros.learning.episode_bag import read_episode
from diffusion_policy_ros.learning.train import _param_groups, train, warm_start
from diffusion_policy_ros.learning.train_config import TrainConfig, load_train_config
from diffusion_policy_ros.policy.checkpoint import load_checkpoint
from diffusion_policy_ros.policy.configuration_diffusion import (
    DiffusionPolicyConfig,
    load_policy_config,
)
from diffusion_policy_ros.policy.modeling_diffusion import DiffusionPolicy
from diffusion_policy_ros.sim.camera import DEFAULT_RESOLUTION

pytestmark = pytest.mark.slow  # trains policies: ~1 min; CI runs it, -m "not slow" skips

@pytest.fixture
def tiny(tiny_policy_fields):
    return {k: v for k, v in tiny_policy_fields.items() if k != "num_inference_steps"}


@pytest.fixture(scope="module")
def demos(tiny_demos):
    return tiny_demos


def _log(run):
    return [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]


def test_tiny_policy_loss_falls_and_checkpoint_loads(demos, tiny, tmp_path):
    config = DiffusionPolicyConfig(**tiny)
    tc = TrainConfig(steps=150, batch_size=16, lr=2e-3, warmup_steps=10, log_every=10,
                     val_every=150, checkpoint_every=150, val_fraction=0.0, num_threads=2)
    ckpt = train(demos, config, tc, tmp_path / "run", progress=False)
    losses = [r["loss"] for r in _log(tmp_path / "run") if "loss" in r]
    assert min(losses[-3:]) < losses[0] / 2, losses  # measured ~2.7x in 150 steps
    policy, meta = load_checkpoint(ckpt)
    assert meta["extra"]["step"] == 150 and meta["dataset"]["hash"]
    assert policy.config == config


def test_resume_continues_the_same_run(demos, tiny, tmp_path):
    """With the grounding in its own optimiser group (both groups' moments are saved)."""
    config = DiffusionPolicyConfig(**tiny, target_grounding=True, grounding_dim=8,
                                   target_aux_weight=1.0)
    full = TrainConfig(steps=12, batch_size=8, warmup_steps=2, log_every=1, val_every=100,
                       checkpoint_every=6, val_fraction=0.0, num_threads=2,
                       grounding_lr_scale=10.0)
    groups = _param_groups(DiffusionPolicy(config), full)
    assert groups[1]["lr"] == 10 * full.lr and len(groups[1]["params"]) == 14
    train(demos, config, full, tmp_path / "a", progress=False)
    half = TrainConfig(**{**full.__dict__, "max_minutes": 1e-9})
    train(demos, config, half, tmp_path / "b", progress=False)
    with pytest.raises(FileExistsError, match="--resume"):
        train(demos, config, full, tmp_path / "b", progress=False)
    train(demos, config, full, tmp_path / "b", resume=True, progress=False)
    a = [r["loss"] for r in _log(tmp_path / "a")]
    b = [r["loss"] for r in _log(tmp_path / "b")]
    assert len(b) == len(a) == 12
    assert b == pytest.approx(a, rel=1e-4)


def test_warm_start_copies_matching_weights_and_keeps_new_ones(demos, tiny, tmp_path):
    config = DiffusionPolicyConfig(**tiny)
    tc = TrainConfig(steps=2, batch_size=4, warmup_steps=0, val_every=100, checkpoint_every=2,
                     val_fraction=0.0, num_threads=2)
    source, _ = load_checkpoint(train(demos, config, tc, tmp_path / "a", progress=False))
    grounded = DiffusionPolicyConfig(**{**tiny, "point_language_film": True})
    policy = DiffusionPolicy(grounded)
    copied, fresh = warm_start(policy, tmp_path / "a" / "checkpoint")
    assert fresh and all(k.startswith("point_encoder.films.") for k in fresh)
    theirs = source.state_dict()
    assert copied == len([k for k in theirs if not k.startswith("normalizer.")])
    ours = policy.state_dict()
    assert all(torch.equal(ours[k], v) for k, v in theirs.items()
               if not k.startswith("normalizer."))
    warm = TrainConfig(**{**tc.__dict__, "init_from": str(tmp_path / "a" / "checkpoint")})
    ckpt = train(demos, grounded, warm, tmp_path / "b", progress=False)
    assert load_checkpoint(ckpt)[0].config.point_language_film


def test_shipped_configs_load():
    assert load_train_config().steps > 0
    for name in ("policy_unet", "policy_dit"):
        assert load_policy_config(name).horizon == 16


def test_closed_loop_evaluation_runs_a_checkpoint(tiny_checkpoint, tmp_path):
    from diffusion_policy_ros.acting.grasp_rules import load_grasp_rules
    from diffusion_policy_ros.config import CONFIG_DIR
    from diffusion_policy_ros.learning.evaluate import evaluate, write_report

    for mode, precision in (("task", "fp32"), ("wrong", "bf16"), ("description", "fp32")):
        resolution = [160, 90] if mode == "wrong" else None
        object_set = "varied" if mode == "description" else None
        rules = load_grasp_rules(CONFIG_DIR / "grasp_rules.yaml") if mode == "task" else None
        summary, outcomes = evaluate(tiny_checkpoint, episodes=1, seed=40, instruction_mode=mode,
                                     progress=False, precision=precision, num_samples=2,
                                     resolution=resolution, rules=rules, object_set=object_set,
                                     media_dir=tmp_path / "media" if mode == "task" else None)
        assert summary["camera"] == {"resolution": resolution or list(DEFAULT_RESOLUTION),
                                     "depth_noise": False, "object_set": object_set or "five"}
        assert summary["episodes"] == 1 and summary["chunk_latency_ms_p50"] > 0
        policy = summary["policy"]  # the report says what ran
        assert (policy["backend"], policy["precision"], policy["num_samples"]) == (
            "torch", precision, 2) and policy["num_inference_steps"] >= 1
        if rules:  # the rules file's
            assert summary["grasp_retry"] and summary["grasp_retry_max_retries"] == 2
            assert summary["grasp_lift"] and outcomes[0].grasp_lifts in (0, 1)
        else:  # none by default, as policy_node's
            assert not summary["grasp_retry"] and not summary["grasp_lift"]
            assert (outcomes[0].grasp_retries, outcomes[0].grasp_lifts) == (0, 0)
        if mode == "task":  # one GIF frame per chunk + the last, and the plot
            with Image.open(tmp_path / "media" / "episode_40.gif") as gif:
                assert gif.n_frames == len(outcomes[0].chunk_latency_ms) + 1
                assert gif.width == 480
            assert (tmp_path / "media" / "episode_40.png").stat().st_size > 10_000
        assert outcomes[0].episode_time_s > 0 and outcomes[0].chunk_latency_ms
        if mode == "wrong":
            from diffusion_policy_ros.sim.task import parse_instruction

            named = parse_instruction(outcomes[0].instruction,
                                      ["red_cube", "green_cube", "blue_cube", "yellow_cylinder",
                                       "purple_cylinder"])
            assert named != outcomes[0].target
        if mode == "description":  # the varied scene, the object named without its colour
            assert outcomes[0].template == "description"
            assert outcomes[0].target.split("_")[0] not in outcomes[0].instruction.split()
    write_report(tmp_path / "report.json", summary, outcomes)
    assert json.loads((tmp_path / "report.json").read_text())["summary"]["episodes"] == 1


def test_probe_reports_first_frame_decisions(demos, tiny, tmp_path):
    from diffusion_policy_ros.learning.grounding_probe import probe

    config = DiffusionPolicyConfig(**{**tiny, "grasp_aux_weight": 1.0})
    tc = TrainConfig(steps=2, batch_size=4, warmup_steps=0, val_every=100, checkpoint_every=2,
                     val_fraction=0.5, num_threads=2)
    ckpt = train(demos, config, tc, tmp_path / "run", progress=False)
    report = probe(str(ckpt), str(demos), episodes=5, val_fraction=0.5)
    assert report["episodes"] == 1 and report["split"] == "held-out"
    assert all(report[k] >= 0 for k in ("first_chunk_end_rad", "grasp_head_rad",
                                        "grasp_mean_rad"))


def test_training_sets_the_arm_kinematics_of_the_tool_relative_target(demos, tiny, tmp_path):
    """Warm-started from a policy without it, like the shipped policy's second stage."""
    from diffusion_policy_ros.sim.ik import TcpIk
    from diffusion_policy_ros.sim.scene import load_model

    grounded = {**tiny, "target_grounding": True, "grounding_dim": 8}
    tc = TrainConfig(steps=2, batch_size=4, warmup_steps=0, val_every=100, checkpoint_every=2,
                     val_fraction=0.0, num_threads=2)
    train(demos, DiffusionPolicyConfig(**grounded), tc, tmp_path / "a", progress=False)
    config = DiffusionPolicyConfig(**grounded, tool_relative_target=True, tool_target_bands=2)
    warm = TrainConfig(**{**tc.__dict__, "init_from": str(tmp_path / "a" / "checkpoint")})
    policy, _ = load_checkpoint(train(demos, config, warm, tmp_path / "b", progress=False))
    q = torch.tensor([0.3, -1.2, 1.5, -1.8, -1.57, 0.2])
    expected = TcpIk(load_model()).forward(q.numpy())[0]
    torch.testing.assert_close(policy.kinematics(q), torch.as_tensor(expected).float(),
                               atol=1e-5, rtol=0)


def test_trains_on_several_directories_and_switched_instructions(demos, tiny, tmp_path):
    from diffusion_policy_ros.learning.collect import SwitchConfig, collect

    switched = tmp_path / "switched"
    collect(1, switched, seed=40000, progress=False, switches=SwitchConfig())
    tc = TrainConfig(steps=2, batch_size=4, warmup_steps=1, log_every=1, val_every=100,
                     checkpoint_every=100, val_fraction=0.0, num_threads=2)
    ckpt = train([demos, switched], DiffusionPolicyConfig(**tiny), tc, tmp_path / "run",
                 progress=False)
    _, meta = load_checkpoint(ckpt)
    assert meta["dataset"]["id"] == f"{Path(demos).resolve()} + {switched.resolve()}"
    extra = meta["extra"]
    assert extra["train_episodes"] + extra["val_episodes"] == \
        len(list(Path(demos).glob("episode_*"))) + 1
    # Both instructions of the switched episode were embedded for training.
    report = json.loads((switched / "collection_040000.json").read_text())
    assert report["switches"] == {"earliest_s": 0.3, "latest_s": 1.5}
    cached = json.loads((tmp_path / "run" / "language_cache.json").read_text())
    first = read_episode(switched / "episode_040000").outcome["first_instruction"]
    assert first in json.dumps(cached)
