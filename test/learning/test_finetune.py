"""dpr finetune: PPO iterations on a tiny policy, exact resume, and the ways a run stops."""

import dataclasses
import json
import os
import subprocess
import sys

import pytest
import torch
import yaml
from safetensors.torch import load_file

from diffusion_policy_ros.learning import finetune as ft
from diffusion_policy_ros.learning.finetune_config import FinetuneConfig, load_finetune_config
from diffusion_policy_ros.learning.optimizer_state import STATE_JSON, STATE_TENSORS
from diffusion_policy_ros.policy.checkpoint import load_checkpoint
from diffusion_policy_ros.ros.processes import stop_process

#: Two envs, episodes of 0.3 s (3 control steps), one critic-only iteration first.
SMALL = FinetuneConfig(iterations=3, num_envs=2, vector_env="sync", steps_per_env=4,
                       time_limit_s=0.3, epochs=2, minibatches=2, critic_warmup_iterations=1,
                       checkpoint_every=1, device="cpu", num_threads=1, seed=7000)


def _log(run):
    return [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]


def test_shipped_settings_load():
    config = load_finetune_config()
    assert (config.gamma, config.gae_lambda) == (0.99, 0.95)
    assert (config.success_weight, config.distance_weight, config.smoothness_weight) == (
        5.0, 0.8, 0.2)


def test_iterations_on_two_envs_train_and_write_a_loadable_checkpoint(tiny_checkpoint,
                                                                      tmp_path):
    run = tmp_path / "run"
    path = ft.finetune(tiny_checkpoint, SMALL, run, progress=False)
    log = _log(run)
    assert [r["iteration"] for r in log] == [1, 2, 3]
    assert [r["policy_trained"] for r in log] == [False, True, True]
    for r in log:
        # Whole episodes only: every env ran at least 4 steps in episodes of 3.
        assert r["episodes"] >= 4 and r["env_steps"] >= 2 * SMALL.steps_per_env
        assert all(torch.isfinite(torch.tensor(r[k])) for k in ("value_loss", "return"))
    for r in log[1:]:
        for key in ("policy_loss", "kl_ref", "approx_kl", "clip_fraction"):
            assert torch.isfinite(torch.tensor(r[key])), key
        assert r["kl_ref"] > 0  # the policy moved away from the imitation policy ...
    trained, meta = load_checkpoint(path)
    start, _ = load_checkpoint(tiny_checkpoint)
    moved = [n for n, v in trained.state_dict().items()
             if not torch.equal(v, start.state_dict()[n])]
    assert moved and all(n.startswith("denoiser.") for n in moved)  # ... by its denoiser only
    assert meta["extra"]["finetune"]["iterations_done"] == 3
    assert (run / "learning_curve.png").stat().st_size > 0
    assert list((run / "tb").glob("events.out.tfevents.*"))
    with pytest.raises(FileExistsError):
        ft.finetune(tiny_checkpoint, SMALL, run, progress=False)


def test_resume_is_exact(tiny_checkpoint, tmp_path):
    straight, split = tmp_path / "straight", tmp_path / "split"
    ft.finetune(tiny_checkpoint, SMALL, straight, progress=False)
    ft.finetune(tiny_checkpoint, dataclasses.replace(SMALL, iterations=2), split,
                progress=False)
    ft.finetune(tiny_checkpoint, SMALL, split, resume=True, progress=False)
    a = load_file(str(straight / STATE_TENSORS))
    b = load_file(str(split / STATE_TENSORS))
    assert set(a) == set(b)
    assert [name for name in a if not torch.equal(a[name], b[name])] == []
    drop = ("rollout_s", "update_s", "env_steps_per_s")
    assert ([{k: v for k, v in r.items() if k not in drop} for r in _log(straight)]
            == [{k: v for k, v in r.items() if k not in drop} for r in _log(split)])


def test_the_joint_stage_trains_the_encoders_through_checkpointing(tiny_checkpoint, tmp_path):
    config = dataclasses.replace(SMALL, iterations=2, critic_warmup_iterations=0,
                                 frozen_iterations=1, encoder_lr=1e-3)
    path = ft.finetune(tiny_checkpoint, config, tmp_path / "run", progress=False)
    assert [r["stage"] for r in _log(tmp_path / "run")] == ["frozen", "joint"]
    trained, _ = load_checkpoint(path)
    start, _ = load_checkpoint(tiny_checkpoint)
    moved = {n.split(".")[0] for n, v in trained.state_dict().items()
             if not torch.equal(v, start.state_dict()[n])}
    assert {"denoiser", "fusion"} <= moved


def test_the_update_takes_the_cores_the_ranks_on_this_machine_share(monkeypatch):
    cores = len(os.sched_getaffinity(0))
    assert ft.update_thread_count(dataclasses.replace(SMALL, update_threads=3)) == 3
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert ft.update_thread_count(SMALL) == cores
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(2 * cores))
    assert ft.update_thread_count(SMALL) == 1


def test_the_joint_stage_reference_condition_is_that_of_its_whole_history(tiny_checkpoint):
    """The KL reference keeps one encoding per frame in the joint stage: the same chunk
    as encoding each stored history whole, while the policy's encoders differ from it."""
    from diffusion_policy_ros.learning.ppo_policy import DiffusionActorCritic, ValueNetwork
    from diffusion_policy_ros.policy.features import (
        IMAGE,
        LANGUAGE,
        POINTS_RGB,
        POINTS_XYZ,
        STATE,
    )
    from diffusion_policy_ros.sim.scene import JOINT_NAMES

    policy, _ = load_checkpoint(tiny_checkpoint, joint_names=list(JOINT_NAMES))
    reference, _ = load_checkpoint(tiny_checkpoint)
    with torch.no_grad():
        for w in policy.rgb_encoder.parameters():
            w.add_(0.05)
    c = policy.config
    ac = DiffusionActorCritic(policy, ValueNetwork(c.cond_dim, c.state_dim, 16, 0.3))
    collector = ft.RolloutCollector(ac, reference, SMALL, torch.device("cpu"), "fp32", 0, 1)
    try:
        buffer, _ = collector.collect(0.03, joint=True)
    finally:
        collector.close()
    data, valid = buffer.data, buffer.valid
    assert int(valid.sum()) >= 2 * SMALL.steps_per_env
    batch = {IMAGE: data["image"][valid], POINTS_XYZ: data["points"][valid],
             POINTS_RGB: data["colors"][valid], STATE: data["state"][valid],
             LANGUAGE: data["language"][valid]}
    with torch.no_grad():
        whole = reference.denoise(reference.encode_observation(batch),
                                  data["noises"][valid].transpose(0, 1))
        policy_chunk = ac.mean_chunk(policy.encode_observation(batch), data["noises"][valid])
    assert torch.allclose(data["ref_mean"][valid], whole.float(), atol=1e-5)
    assert not torch.allclose(policy_chunk.float(), whole.float(), atol=1e-3)


def test_the_rollouts_act_under_the_rules_file_as_policy_node_and_dpr_eval_do(tiny_checkpoint):
    """Every env's acting loop is a PolicyAgent with the rules of ``config.rules``: the
    lift as well as the retry, each env with rules of its own; none without a file."""
    from diffusion_policy_ros.config import CONFIG_DIR
    from diffusion_policy_ros.learning.ppo_policy import DiffusionActorCritic, ValueNetwork
    from diffusion_policy_ros.sim.scene import JOINT_NAMES

    policy, _ = load_checkpoint(tiny_checkpoint, joint_names=list(JOINT_NAMES))
    reference, _ = load_checkpoint(tiny_checkpoint)
    c = policy.config
    ac = DiffusionActorCritic(policy, ValueNetwork(c.cond_dim, c.state_dim, 16, 0.3))
    config = dataclasses.replace(SMALL, rules=str(CONFIG_DIR / "grasp_rules.yaml"))
    collector = ft.RolloutCollector(ac, reference, config, torch.device("cpu"), "fp32", 0, 1)
    try:
        rules = [agent.rules.rules for agent in collector.agents]
        assert [[type(rule).__name__ for rule in r] for r in rules] == [
            ["EmptyGraspRetry", "StalledGraspLift"]] * 2
        assert rules[0][0] is not rules[1][0]
        _, episodes = collector.collect(0.03, joint=False)
        assert len(episodes) >= 4  # a task per episode in every env's agent
        assert all(agent.statistics()["history_restarts"] >= 2 for agent in collector.agents)
    finally:
        collector.close()
    plain = ft.RolloutCollector(ac, reference, SMALL, torch.device("cpu"), "fp32", 0, 1)
    try:
        assert all(not agent.rules for agent in plain.agents)
    finally:
        plain.close()


def test_a_non_finite_observation_stops_the_iteration_naming_the_seed(tiny_checkpoint,
                                                                      tmp_path, monkeypatch):
    from diffusion_policy_ros.sim.env import GraspEnv

    run = tmp_path / "run"
    ft.finetune(tiny_checkpoint, dataclasses.replace(SMALL, iterations=1), run,
                progress=False)
    before = (run / "checkpoint" / "model.safetensors").read_bytes()
    real = GraspEnv.step

    def corrupt(self, action, stamp_s=None):
        out = real(self, action, stamp_s)
        out[0]["joint_positions"][0] = float("nan")
        return out

    monkeypatch.setattr(GraspEnv, "step", corrupt)
    with pytest.raises(ft.FinetuneStopped, match=r"iteration 2 stopped: episode seed 70\d\d"):
        ft.finetune(tiny_checkpoint, SMALL, run, resume=True, progress=False)
    assert (run / "checkpoint" / "model.safetensors").read_bytes() == before
    assert json.loads((run / STATE_JSON).read_text())["iteration"] == 1


@pytest.mark.slow
def test_a_killed_rollout_worker_stops_the_run_with_the_reason(tiny_checkpoint, tmp_path,
                                                               monkeypatch):
    real = ft.RolloutCollector.collect
    calls = []

    def kill_on_second(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            self.envs.processes[1].kill()
            self.envs.processes[1].join()
        return real(self, *args, **kwargs)

    monkeypatch.setattr(ft.RolloutCollector, "collect", kill_on_second)
    run = tmp_path / "run"
    with pytest.raises(ft.FinetuneStopped, match="rollout worker died"):
        ft.finetune(tiny_checkpoint, dataclasses.replace(SMALL, vector_env="async"), run,
                    progress=False)
    assert json.loads((run / STATE_JSON).read_text())["iteration"] == 1
    load_checkpoint(run / "checkpoint")


def test_a_worker_dying_during_a_step_stops_the_run_with_the_reason(tiny_checkpoint, tmp_path,
                                                                  monkeypatch):
    """The worker dies with a step pending: closing the envs must not end the run with
    the dead pipe's EOFError instead of the reason, nor leave the other worker running."""
    real = ft.RolloutCollector.collect
    workers = []

    def kill_during_a_step(self, *args, **kwargs):
        envs = self.envs
        workers.extend(envs.processes)
        step_wait = envs.step_wait

        def wait_for_a_dead_worker(*a, **k):
            envs.processes[1].kill()
            envs.processes[1].join()
            return step_wait(*a, **k)

        envs.step_wait = wait_for_a_dead_worker
        return real(self, *args, **kwargs)

    monkeypatch.setattr(ft.RolloutCollector, "collect", kill_during_a_step)
    with pytest.raises(ft.FinetuneStopped, match="rollout worker died"):
        ft.finetune(tiny_checkpoint, dataclasses.replace(SMALL, vector_env="async"),
                    tmp_path / "run", progress=False)
    assert workers and not any(w.is_alive() for w in workers)


def test_cli_refuses_a_corrupt_checkpoint_in_one_line(tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "metadata.json").write_text("{not json")
    result = subprocess.run([sys.executable, "-m", "diffusion_policy_ros.cli", "finetune",
                             "--init", str(bad), "--out", str(tmp_path / "run")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip().startswith("dpr finetune: ")
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_two_data_parallel_workers_under_torchrun(tiny_checkpoint, tmp_path):
    """Two processes (torchrun, gloo on loopback), each with its own two envs."""
    settings = tmp_path / "finetune.yaml"
    fields = dataclasses.asdict(dataclasses.replace(SMALL, iterations=2))
    settings.write_text(yaml.safe_dump(fields))
    run = tmp_path / "run"
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1",
         "--nproc-per-node", "2", "-m", "diffusion_policy_ros.cli", "finetune", "--init",
         str(tiny_checkpoint), "--out", str(run), "--finetune-config", str(settings)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        output, _ = proc.communicate(timeout=600)
    finally:
        stop_process(proc)
    assert proc.returncode == 0, output[-3000:]
    log = _log(run)
    assert [r["iteration"] for r in log] == [1, 2]
    # Both ranks' episodes are counted: 2 ranks x 2 envs x at least 2 episodes.
    assert all(r["episodes"] >= 8 for r in log)
    # Rank 0 saved its own envs' episode counters; rank 1's envs took the other seeds.
    assert json.loads((run / STATE_JSON).read_text())["episodes_started"][0] >= 4
    load_checkpoint(run / "checkpoint")


def _eval_report(path, outcomes: dict[int, bool]):
    path.write_text(json.dumps({"summary": {}, "episodes": [
        {"seed": seed, "success": ok} for seed, ok in outcomes.items()]}))
    return path


def test_the_replay_pool_is_the_failed_training_seeds_and_never_a_held_out_one(tmp_path):
    report = _eval_report(tmp_path / "train.json", {200001: True, 200002: False,
                                                    200003: False})
    config = dataclasses.replace(SMALL, replay_report=str(report), replay_probability=0.5)
    assert ft.replay_pool(config) == [200002, 200003]
    assert ft.replay_pool(dataclasses.replace(config, replay_probability=0.0)) == []
    held_out = _eval_report(tmp_path / "held_out.json", {5003: False, 200002: False})
    with pytest.raises(ValueError, match="held-out seeds \\[5003\\]"):
        ft.replay_pool(dataclasses.replace(config, replay_report=str(held_out)))
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(ValueError, match="not a dpr eval report"):
        ft.replay_pool(dataclasses.replace(config, replay_report=str(tmp_path / "bad.json")))
    all_lifted = _eval_report(tmp_path / "lifted.json", {200001: True})
    with pytest.raises(ValueError, match="no failed episode"):
        ft.replay_pool(dataclasses.replace(config, replay_report=str(all_lifted)))


def test_replayed_failures_are_a_share_of_the_episodes_and_logged_apart(tiny_checkpoint,
                                                                        tmp_path):
    report = _eval_report(tmp_path / "train.json", {200002: False, 200003: False})
    config = dataclasses.replace(SMALL, iterations=1, steps_per_env=12,
                                 replay_report=str(report), replay_probability=0.5)
    ft.finetune(tiny_checkpoint, config, tmp_path / "run", progress=False)
    (record,) = _log(tmp_path / "run")
    # The draws depend only on (seed, env, episode): this configuration replays some.
    assert 0 < record["episodes_replayed"] < record["episodes"]
    assert 0.0 <= record["success_rate_fresh"] <= 1.0
