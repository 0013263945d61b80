"""Fixtures shared across the test tree: two recorded demos and a tiny policy trained on them.

Session-scoped: collecting (~2 s) and training the tiny checkpoint (~5 s) once
serves the training, replay, policy_node and bring-up tests. Nothing here
imports rclpy (test/ros/conftest.py sets the ROS environment first).
"""

import pytest

#: A policy small enough to train in seconds on the 2-core machine; the same
#: observation interface (128x128 image, 1024 points) as the shipped configs.
TINY_POLICY = dict(image_base_channels=8, image_stages=2, image_token_grid=2, norm_groups=4,
                   point_feature_dim=32, point_tokens=4, fusion_dim=32, fusion_layers=1,
                   fusion_heads=2, cond_dim=32, timestep_embed_dim=32, unet_base_dim=16,
                   unet_levels=2, num_inference_steps=2)
DEMO_SEEDS = (21, 22)


@pytest.fixture(scope="session")
def tiny_policy_fields() -> dict:
    return dict(TINY_POLICY)


@pytest.fixture(scope="session")
def tiny_demos(tmp_path_factory):
    """Directory with two expert episodes (seeds 21, 22), raw Kinect topics included."""
    from diffusion_policy_ros.learning.collect import collect

    out = tmp_path_factory.mktemp("tiny_demos")
    collect(len(DEMO_SEEDS), out, seed=DEMO_SEEDS[0], raw_camera=True, progress=False)
    return out


@pytest.fixture(scope="session")
def tiny_checkpoint(tiny_demos, tmp_path_factory):
    """A TINY_POLICY checkpoint after 4 training steps on ``tiny_demos`` (plumbing only)."""
    from diffusion_policy_ros.learning.train import train
    from diffusion_policy_ros.learning.train_config import TrainConfig
    from diffusion_policy_ros.policy.configuration_diffusion import DiffusionPolicyConfig

    tc = TrainConfig(steps=4, batch_size=8, warmup_steps=1, val_fraction=0.0, num_threads=1,
                     device="cpu")
    return train(tiny_demos, DiffusionPolicyConfig(**TINY_POLICY), tc,
                 tmp_path_factory.mktemp("tiny_run") / "run", progress=False)


@pytest.fixture(scope="session")
def tiny_aot_student(tmp_path_factory):
    """(checkpoint, graph dir, manifest): a TINY_POLICY one-step consistency student with
    every stage the compiled graph can hold (grounding, K = 3 medoid, chunk smoothing),
    saved and compiled by AOTInductor for one intra-op thread once per test run: the
    compiler is the slow part (about a minute), so the export and policy_node tests
    share one package. Every graph is only frozen: the shipped chunk head's GEMM
    autotuning would make this compile several times longer (test_export checks a
    layer compiled with it on its own)."""
    pytest.importorskip("torch._inductor")
    import torch

    from diffusion_policy_ros.policy.checkpoint import load_checkpoint, save_checkpoint
    from diffusion_policy_ros.policy.configuration_diffusion import DiffusionPolicyConfig
    from diffusion_policy_ros.policy.export import AOT_FROZEN, AOT_INDUCTOR_CONFIGS, export_aot
    from diffusion_policy_ros.policy.modeling_diffusion import DiffusionPolicy
    from diffusion_policy_ros.policy.runner import default_graph_dir

    torch.manual_seed(0)
    config = DiffusionPolicyConfig(**{
        **TINY_POLICY, "target_grounding": True, "grounding_dim": 8, "sampler": "consistency",
        "num_inference_steps": 1, "prediction_type": "sample", "chunk_lowpass_terms": 3,
        "num_samples": 3})
    checkpoint = save_checkpoint(DiffusionPolicy(config).eval(),
                                 tmp_path_factory.mktemp("aot_student") / "ckpt",
                                 dataset_id="test")
    policy, meta = load_checkpoint(checkpoint)
    out = default_graph_dir(checkpoint, "aotinductor", 1)  # policy_node's num_threads
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        manifest = export_aot(policy, out, meta["weights_sha256"],
                              inductor_configs=dict.fromkeys(AOT_INDUCTOR_CONFIGS, AOT_FROZEN))
    finally:
        torch.set_num_threads(threads)
    return checkpoint, out, manifest


class ColconInstall:
    """A ``colcon build`` of this repository and the environment its setup script gives."""

    def __init__(self, base):
        self.base = base  # the install base: local_setup.bash, diffusion_policy_ros/
        self.prefix = base / "diffusion_policy_ros"
        self.share = self.prefix / "share" / "diffusion_policy_ros"

    def env(self, base_env: dict | None = None) -> dict:
        """``base_env`` after ``source install/local_setup.bash``, as a ROS user runs.

        The venv goes first on PATH and into AMENT_PREFIX_PATH (the ros-* wheels' ament
        index and the ros2-tools live there), as scripts/setup.sh users export it.
        """
        import os
        import subprocess
        import sys
        from pathlib import Path

        env = dict(os.environ if base_env is None else base_env)
        bin_dir = str(Path(sys.executable).parent)
        env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
        env["AMENT_PREFIX_PATH"] = sys.prefix
        env.pop("PYTHONPATH", None)
        out = subprocess.run(["bash", "-c", f"source '{self.base}/local_setup.bash' && env -0"],
                             env=env, capture_output=True, check=True, timeout=60).stdout
        return dict(item.split("=", 1) for item in out.decode().split("\0") if "=" in item)


@pytest.fixture(scope="session")
def colcon_install(tmp_path_factory) -> ColconInstall:
    """This repository built with colcon (no symlinks: what `colcon build` installs)."""
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    colcon = Path(sys.executable).parent / "colcon"
    if not colcon.exists():
        colcon = shutil.which("colcon")
    assert colcon, "colcon not found: run scripts/setup.sh"
    work = tmp_path_factory.mktemp("colcon")
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}",
               COLCON_HOME=str(work / "colcon_home"))
    result = subprocess.run(
        [str(colcon), "--log-base", str(work / "log"), "build", "--paths", str(root),
         "--build-base", str(work / "build"), "--install-base", str(work / "install")],
        cwd=work, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    return ColconInstall(work / "install")


@pytest.fixture(scope="session")
def accelerator():
    """This machine's CUDA or Ascend NPU device; the test is skipped where there is none
    (CI). ``scripts/accelerator_check.sh`` runs these tests on a machine that has one."""
    from diffusion_policy_ros.policy.devices import resolve_device

    device = resolve_device("auto")
    if device.type == "cpu":
        pytest.skip("no CUDA or NPU device on this machine")
    return device
