"""dpr distill: consistency distillation of a tiny checkpoint on two recorded demos."""

import dataclasses
import json

import numpy as np
import pytest
import torch

from diffusion_policy_ros.learning.distill import (
    ConditionSet,
    ConsistencyDistiller,
    _conditions,
    cached_anchors,
    distill,
    weights_fingerprint,
)
from diffusion_policy_ros.learning.distill_config import DistillConfig, load_distill_config
from diffusion_policy_ros.policy.checkpoint import load_checkpoint
from diffusion_policy_ros.policy.runner import PolicyRunner, synthetic_observation


def test_shipped_settings_load():
    config = load_distill_config()
    assert (config.target_ema_start, config.target_ema_end) == (0.95, 0.999)
    assert config.consistency_skip == 10


def test_distillation_loss_falls_and_the_student_samples_in_one_step(tiny_checkpoint,
                                                                      tiny_demos, tmp_path):
    config = DistillConfig(steps=120, batch_size=32, lr=1e-3, warmup_steps=5, log_every=20,
                           val_every=1000, val_samples=32, val_fraction=0.5, num_threads=1,
                           device="cpu", sampling_steps=1, anchor_weight=1.0,
                           chunk_lowpass_terms=3)
    ckpt = distill(tiny_checkpoint, [tiny_demos], config, tmp_path / "run", progress=False)
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in log if "loss" in r]
    assert losses[-1] < 0.5 * losses[0], losses
    assert [r["step"] for r in log if "val" in r] == [0, 120]

    student, meta = load_checkpoint(ckpt)
    teacher, _ = load_checkpoint(tiny_checkpoint)
    assert student.config.sampler == "consistency" and student.config.num_inference_steps == 1
    # The student outputs the clean chunk; the teacher keeps predicting the noise.
    assert (student.config.prediction_type, teacher.config.prediction_type) == ("sample",
                                                                                "epsilon")
    assert (student.config.chunk_lowpass_terms, teacher.config.chunk_lowpass_terms) == (3, 0)
    # Only the denoiser was distilled: encoders, fusion and normaliser are the teacher's.
    for name, value in teacher.state_dict().items():
        if not name.startswith("denoiser."):
            assert torch.equal(value, student.state_dict()[name]), name
    assert meta["extra"]["distill"]["steps_done"] == 120
    # The teacher's conditions and anchor chunks are cached for a rerun on the same data.
    assert len(list((tmp_path / "run").glob("conditions_*.safetensors"))) == 2
    assert len(list((tmp_path / "run").glob("teacher_chunks_*.safetensors"))) == 1
    # A second run continues from this student; a checkpoint not distilled from this
    # teacher is refused, and so is a student as the teacher.
    more = dataclasses.replace(config, steps=2, init_student=str(ckpt))
    again = distill(tiny_checkpoint, [tiny_demos], more, tmp_path / "run2", progress=False)
    assert load_checkpoint(again)[1]["extra"]["distill"]["steps_done"] == 2
    with pytest.raises(ValueError, match="was not distilled from"):
        distill(tiny_checkpoint, [tiny_demos],
                dataclasses.replace(config, init_student=str(tiny_checkpoint)),
                tmp_path / "run3", progress=False)
    with pytest.raises(ValueError, match="predicts sample, this run's student epsilon"):
        distill(tiny_checkpoint, [tiny_demos],
                dataclasses.replace(more, student_prediction_type="epsilon"),
                tmp_path / "run2", progress=False)
    with pytest.raises(ValueError, match="already a consistency student"):
        distill(ckpt, [tiny_demos], config, tmp_path / "run4", progress=False)

    runner = PolicyRunner(student, device="cpu")
    rng = np.random.default_rng(0)
    history = [synthetic_observation(student, rng) for _ in range(2)]
    chunk = runner.predict(history, "pick up the red cube", noise=0)
    assert chunk.shape == (16, 7) and np.isfinite(chunk).all()
    lo, hi = (student.normalizer.stats()["action"][k].numpy() for k in ("min", "max"))
    assert (chunk >= lo - 1e-5).all() and (chunk <= hi + 1e-5).all()
    assert len(runner.timer.durations_s["denoiser_step"]) == 1


def test_caches_are_keyed_on_the_weights_they_come_from(tiny_checkpoint, tiny_demos, tmp_path):
    """A run directory reused with another teacher computes its conditions and anchors
    again instead of reading the first teacher's; a new denoiser with the same encoders
    reads the same conditions."""
    config = DistillConfig(val_fraction=0.5, num_threads=1, device="cpu", anchor_weight=1.0)
    teacher, _ = load_checkpoint(tiny_checkpoint)
    device = torch.device("cpu")
    first = _conditions(teacher, [tiny_demos], config, tmp_path, device, progress=False)
    cached_anchors(teacher, first[0], config, tmp_path, first[3], device)

    other_denoiser, _ = load_checkpoint(tiny_checkpoint)
    with torch.no_grad():
        next(other_denoiser.denoiser.parameters()).add_(1.0)
    assert weights_fingerprint(other_denoiser) != weights_fingerprint(teacher)
    assert weights_fingerprint(other_denoiser, skip_prefix="denoiser.") == \
        weights_fingerprint(teacher, skip_prefix="denoiser.")
    _conditions(other_denoiser, [tiny_demos], config, tmp_path, device, progress=False)
    assert len(list(tmp_path.glob("conditions_*.safetensors"))) == 2
    cached_anchors(other_denoiser, first[0], config, tmp_path, first[3], device)
    assert len(list(tmp_path.glob("teacher_chunks_*.safetensors"))) == 2

    other_encoders, _ = load_checkpoint(tiny_checkpoint)
    name = next(k for k in other_encoders.state_dict() if not k.startswith("denoiser.")
                and other_encoders.state_dict()[k].is_floating_point())
    with torch.no_grad():
        other_encoders.state_dict()[name].add_(1.0)
    second = _conditions(other_encoders, [tiny_demos], config, tmp_path, device,
                         progress=False)
    assert len(list(tmp_path.glob("conditions_*.safetensors"))) == 4
    assert second[3] == first[3]  # the data's fingerprint, recorded in the checkpoint


def test_the_target_network_follows_the_student_at_the_ema_rate():
    student, teacher = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    from diffusion_policy_ros.policy.configuration_diffusion import DiffusionPolicyConfig
    from diffusion_policy_ros.policy.consistency import ConsistencySchedule

    distiller = ConsistencyDistiller(teacher, student,
                                     ConsistencySchedule(DiffusionPolicyConfig()))
    before = distiller.target.weight.clone()
    with torch.no_grad():
        student.weight.add_(1.0)
    distiller.update_target(0.95)
    assert torch.allclose(distiller.target.weight, before + 0.05)
    assert not distiller.target.weight.requires_grad


def test_condition_sets_round_trip(tmp_path):
    conds = ConditionSet(torch.randn(5, 8), torch.rand(5, 16, 7), torch.randn(5, 2, 7))
    conds.save(tmp_path / "c.safetensors")
    again = ConditionSet.load(tmp_path / "c.safetensors")
    assert torch.equal(again.cond, conds.cond) and len(again) == 5
    assert torch.equal(conds.subset(torch.tensor([1, 3])).clean, conds.clean[[1, 3]])


def test_a_narrower_unet_student_keeps_the_teachers_encoders(tiny_checkpoint, tiny_demos,
                                                             tmp_path):
    config = DistillConfig(steps=60, batch_size=32, lr=1e-3, warmup_steps=5, log_every=20,
                           val_every=1000, val_samples=32, val_fraction=0.5, num_threads=1,
                           device="cpu", anchor_weight=1.0, student_unet_base_dim=8)
    ckpt = distill(tiny_checkpoint, [tiny_demos], config, tmp_path / "run", progress=False)
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in log if "loss" in r]
    assert losses[-1] < losses[0], losses
    student, meta = load_checkpoint(ckpt)
    teacher, _ = load_checkpoint(tiny_checkpoint)
    assert (student.config.unet_base_dim, teacher.config.unet_base_dim) == (8, 16)
    assert meta["parameters"]["denoiser"] < 0.5 * teacher.parameter_counts()["denoiser"]
    for name, value in teacher.state_dict().items():
        if not name.startswith("denoiser."):
            assert torch.equal(value, student.state_dict()[name]), name
    # Continuing needs a student of the same width.
    with pytest.raises(ValueError, match="8 channels wide, this run's student 16"):
        distill(tiny_checkpoint, [tiny_demos],
                dataclasses.replace(config, steps=2, init_student=str(ckpt),
                                    student_unet_base_dim=0), tmp_path / "run", progress=False)
    runner = PolicyRunner(student, device="cpu")
    rng = np.random.default_rng(0)
    chunk = runner.predict([synthetic_observation(student, rng) for _ in range(2)],
                           "pick up the red cube", noise=0)
    assert chunk.shape == (16, 7) and np.isfinite(chunk).all()


def test_only_a_unet_is_narrowed():
    from diffusion_policy_ros.learning.distill import student_config
    from diffusion_policy_ros.policy.configuration_diffusion import DiffusionPolicyConfig

    with pytest.raises(ValueError, match="narrows a U-Net; the teacher's denoiser is a dit"):
        student_config(DiffusionPolicyConfig(denoiser="dit"),
                       DistillConfig(student_unet_base_dim=32))
