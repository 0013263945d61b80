"""dpr prune: DiT teacher on a tiny checkpoint's conditions, N:M pruning, fine-tuning and
consistency distillation of the pruned student, all on two recorded demos."""

import json

import numpy as np
import pytest
import torch
import yaml

from diffusion_policy_ros.cli import build_parser, main
from diffusion_policy_ros.learning.distill_config import DistillConfig
from diffusion_policy_ros.learning.prune import (
    distill_pruned,
    dit_policy_from,
    prune,
    train_teacher,
)
from diffusion_policy_ros.learning.prune_config import PruneConfig
from diffusion_policy_ros.policy.checkpoint import load_checkpoint
from diffusion_policy_ros.policy.configuration_diffusion import DiffusionPolicyConfig
from diffusion_policy_ros.policy.modeling_diffusion import DiffusionPolicy
from diffusion_policy_ros.policy.runner import PolicyRunner, synthetic_observation

TINY_DIT = {"denoiser": "dit", "dit_width": 32, "dit_layers": 4, "dit_heads": 2,
            "dit_mlp_ratio": 2.0, "timestep_embed_dim": 32}


def read_log(run):
    return [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def settings(tmp_path_factory):
    path = tmp_path_factory.mktemp("dit") / "tiny_dit.yaml"
    path.write_text(yaml.safe_dump(TINY_DIT))
    return PruneConfig(pattern="2:4", dit_config=str(path), teacher_steps=60, teacher_lr=2e-3,
                       gate_steps=30, gate_lr=0.05, finetune_steps=120, finetune_lr=2e-3,
                       batch_size=32, warmup_steps=5, log_every=10, val_every=1000,
                       val_samples=32, val_fraction=0.5, num_threads=1, device="cpu",
                       ema_decay=0.9)


@pytest.fixture(scope="module")
def teacher_run(tiny_checkpoint, tiny_demos, settings, tmp_path_factory):
    run = tmp_path_factory.mktemp("prune") / "teacher"
    return run, train_teacher(tiny_checkpoint, [tiny_demos], settings, run, progress=False)


def test_the_dit_teacher_keeps_the_source_encoders(tiny_checkpoint, teacher_run):
    run, ckpt = teacher_run
    teacher, meta = load_checkpoint(ckpt)
    source, _ = load_checkpoint(tiny_checkpoint)
    assert teacher.config.denoiser == "dit" and teacher.config.dit_layers == 4
    assert teacher.config.keep_layers == [] and teacher.config.sampler == "ddim"
    for name, value in source.state_dict().items():
        if not name.startswith("denoiser."):
            assert torch.equal(value, teacher.state_dict()[name]), name
    extra = meta["extra"]["prune"]
    assert extra["stage"] == "teacher" and extra["steps_done"] == 60
    assert {"val_loss", "chunk_error", "chunk_error_arm_rad", "student_2_step",
            "teacher_spread"} <= set(extra["val"])
    assert "source_val_loss" in extra["reference"]
    assert len(list(run.glob("conditions_*.safetensors"))) == 2


def test_dit_policy_from_swaps_only_the_denoiser(tiny_policy_fields):
    torch.manual_seed(0)
    source = DiffusionPolicy(DiffusionPolicyConfig(**tiny_policy_fields))
    dit = dit_policy_from(source, {**TINY_DIT, "dit_layers": 2})
    assert dit.config.denoiser == "dit" and list(dit.denoiser.blocks) == ["0", "1"]
    assert dit.config.cond_dim == source.config.cond_dim
    own = dit.state_dict()
    for name, value in source.state_dict().items():
        if not name.startswith("denoiser."):
            assert torch.equal(value, own[name]), name


def test_prune_keeps_n_of_m_fine_tunes_and_runs_through_the_runner(teacher_run, tiny_demos,
                                                                   settings, tmp_path):
    teacher_dir, ckpt = teacher_run
    ckpt = prune(ckpt, [tiny_demos], settings, tmp_path / "p2", conditions_dir=teacher_dir,
                 progress=False)
    assert not list((tmp_path / "p2").glob("conditions_*"))  # the teacher run's cache served
    pruned, meta = load_checkpoint(ckpt)
    kept = pruned.config.keep_layers
    assert len(kept) == 2 and len(pruned.denoiser.blocks) == 2
    assert sum(i < 2 for i in kept) == 1 and sum(i >= 2 for i in kept) == 1  # 2:4 -> 1 of 2
    gates = json.loads((tmp_path / "p2" / "gates.json").read_text())
    assert gates["keep_layers"] == kept
    assert sum(gates["importance_p"]) == pytest.approx(1.0)
    assert np.allclose(gates["initial_logits"], np.log(gates["importance_p"]))
    # One group of 4 blocks: the C(4, 2) = 6 masks, each tried on the teacher, best first.
    tried = [r["val_loss"] for r in gates["mask_losses"]]
    assert len(tried) == 6 and tried == sorted(tried)
    log = read_log(tmp_path / "p2")
    losses = [r["loss"] for r in log if r.get("phase") == "finetune" and "loss" in r]
    assert np.mean(losses[-3:]) < np.mean(losses[:3]), losses
    extra = meta["extra"]["prune"]
    assert extra["keep_layers"] == kept and extra["pattern"] == "2:4"

    runner = PolicyRunner.from_checkpoint(ckpt, device="cpu")
    rng = np.random.default_rng(0)
    history = [synthetic_observation(pruned, rng) for _ in range(2)]
    chunk = runner.predict(history, "pick up the red cube", noise=0)
    assert chunk.shape == (16, 7) and np.isfinite(chunk).all()


def test_the_pruned_student_distils_from_the_full_teacher(teacher_run, tiny_demos, settings,
                                                          tmp_path):
    teacher_dir, teacher_ckpt = teacher_run
    quick = PruneConfig(**{**settings.__dict__, "gate_steps": 5, "finetune_steps": 5})
    pruned_ckpt = prune(teacher_ckpt, [tiny_demos], quick, tmp_path / "p2",
                        conditions_dir=teacher_dir, progress=False)
    distill_config = DistillConfig(steps=20, batch_size=16, lr=1e-3, warmup_steps=2,
                                   log_every=10, val_every=1000, sampling_steps=1)
    ckpt = distill_pruned(teacher_ckpt, pruned_ckpt, [tiny_demos], quick, distill_config,
                          tmp_path / "cd", conditions_dir=teacher_dir, progress=False)
    student, meta = load_checkpoint(ckpt)
    pruned, _ = load_checkpoint(pruned_ckpt)
    assert student.config.sampler == "consistency" and student.config.num_inference_steps == 1
    assert student.config.keep_layers == pruned.config.keep_layers
    assert meta["extra"]["distill"]["steps_done"] == 20
    assert {"student_1_step", "chunk_error"} <= set(meta["extra"]["distill"]["val_after"])
    runner = PolicyRunner.from_checkpoint(ckpt, device="cpu")
    rng = np.random.default_rng(0)
    history = [synthetic_observation(student, rng) for _ in range(2)]
    assert np.isfinite(runner.predict(history, "pick up the red cube", noise=0)).all()
    assert len(runner.timer.durations_s["denoiser_step"]) == 1

    # A U-Net or an already pruned checkpoint is no teacher to prune from.
    with pytest.raises(ValueError, match="already pruned"):
        prune(pruned_ckpt, [tiny_demos], quick, tmp_path / "again",
              conditions_dir=teacher_dir, progress=False)


@pytest.mark.parametrize("rule", ["importance", "immediate_loss"])
def test_baseline_selections_skip_the_gate_training(rule, teacher_run, tiny_demos, settings,
                                                    tmp_path):
    teacher_dir, teacher_ckpt = teacher_run
    config = PruneConfig(**{**settings.__dict__, "selection": rule, "finetune_steps": 5})
    ckpt = prune(teacher_ckpt, [tiny_demos], config, tmp_path / rule,
                 conditions_dir=teacher_dir, progress=False)
    gates = json.loads((tmp_path / rule / "gates.json").read_text())
    assert gates["final_logits"] == pytest.approx(gates["initial_logits"], abs=1e-6)
    expected = gates["mask_losses"][0]["keep_layers"] if rule == "immediate_loss" else \
        sorted(sorted(range(4), key=lambda i: -gates["importance_p"][i])[:2])
    assert load_checkpoint(ckpt)[0].config.keep_layers == expected
    assert not [r for r in read_log(tmp_path / rule) if r.get("phase") == "gates" and "loss" in r]


def test_the_distill_stage_takes_the_anchor_term_and_refuses_init_student(
        teacher_run, tiny_demos, settings, tmp_path):
    teacher_dir, teacher_ckpt = teacher_run
    quick = PruneConfig(**{**settings.__dict__, "gate_steps": 2, "finetune_steps": 2})
    pruned_ckpt = prune(teacher_ckpt, [tiny_demos], quick, tmp_path / "p2",
                        conditions_dir=teacher_dir, progress=False)
    with pytest.raises(ValueError, match="init_student is dpr distill's"):
        distill_pruned(teacher_ckpt, pruned_ckpt, [tiny_demos], quick,
                       DistillConfig(init_student="x"), tmp_path / "cd", progress=False)
    config = DistillConfig(steps=4, batch_size=8, warmup_steps=1, log_every=2, val_every=100,
                           anchor_weight=1.0)
    distill_pruned(teacher_ckpt, pruned_ckpt, [tiny_demos], quick, config, tmp_path / "cd",
                   conditions_dir=teacher_dir, progress=False)
    assert len(list((tmp_path / "cd").glob("teacher_chunks_*.safetensors"))) == 1


def test_a_unet_is_refused_as_the_model_to_prune(tiny_checkpoint, tiny_demos, tmp_path, capsys):
    assert main(["prune", "--teacher", str(tiny_checkpoint), "--data", str(tiny_demos),
                 "--out", str(tmp_path / "x")]) == 2
    assert "layer pruning needs a DiT" in capsys.readouterr().err


def test_cli_parses_and_reports_bad_settings(tmp_path, capsys):
    args = build_parser().parse_args(["prune", "--stage", "distill", "--teacher", "t",
                                      "--student", "s", "--data", "d", "--out", "o",
                                      "--pattern", "2:4", "--threads", "1"])
    assert callable(args.func) and args.stage == "distill" and args.pattern == "2:4"
    assert main(["prune", "--teacher", "t", "--data", "d", "--out", str(tmp_path / "o"),
                 "--pattern", "4:4"]) == 2
    assert "needs 1 <= N < M" in capsys.readouterr().err
    assert main(["prune", "--stage", "distill", "--teacher", "t", "--data", "d", "--out",
                 str(tmp_path / "o")]) == 2
    assert "needs --student" in capsys.readouterr().err
