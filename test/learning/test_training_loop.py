"""The training-loop skeleton: step count, resume, time budget, checkpoint cadence, run setup."""

import json

import pytest
import torch

from diffusion_policy_ros.learning.optimizer_state import STATE_JSON, STATE_TENSORS
from diffusion_policy_ros.learning.training_loop import (
    JsonLog,
    LoopConfig,
    RunSettings,
    TrainingLoop,
    load_resume_state,
    loss_summary,
    open_local_run,
    open_run,
    save_resume_state,
)


class FakeClock:
    """Seconds that pass only when a step says so."""

    def __init__(self):
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


def _run(config, start_step=0, step_s=0.0, clock=None):
    """(steps done, step indices called, checkpoints (steps done, last))."""
    clock = clock or FakeClock()
    called, saved = [], []

    def step(index):
        called.append(index)
        clock.now_s += step_s

    loop = TrainingLoop(config, lambda n, last: saved.append((n, last)), start_step=start_step,
                        clock=clock)
    return loop.run(step), called, saved


def test_checkpoints_at_the_cadence_and_once_at_the_end():
    done, called, saved = _run(LoopConfig(max_steps=7, checkpoint_every=3))
    assert done == 7 and called == list(range(7))
    assert saved == [(3, False), (6, False), (7, True)]
    # The last step on the cadence: one checkpoint, the last.
    assert _run(LoopConfig(max_steps=6, checkpoint_every=3))[2] == [(3, False), (6, True)]
    assert _run(LoopConfig(max_steps=4))[2] == [(4, True)]  # no cadence: the end only


def test_a_resumed_loop_continues_the_step_count():
    done, called, saved = _run(LoopConfig(max_steps=7, checkpoint_every=3), start_step=4)
    assert done == 7 and called == [4, 5, 6]
    assert saved == [(6, False), (7, True)]
    # A run resumed at (or past) its end does nothing and saves nothing.
    assert _run(LoopConfig(max_steps=7, checkpoint_every=3), start_step=7) == (7, [], [])


def test_the_time_budget_stops_after_the_step_that_passes_it_and_saves():
    config = LoopConfig(max_steps=100, checkpoint_every=4, max_minutes=0.5)
    done, called, saved = _run(config, step_s=7.0)  # 30 s passed during step 5
    assert done == 5 and called == list(range(5))
    assert saved == [(4, False), (5, True)]
    assert _run(LoopConfig(max_steps=3, max_minutes=0.0), step_s=1e6)[0] == 3  # 0 = no limit


def test_the_budget_counts_from_when_the_loop_was_made():
    clock = FakeClock()
    loop = TrainingLoop(LoopConfig(max_steps=10, max_minutes=1.0), clock=clock)
    clock.now_s += 59.0
    assert not loop.out_of_time and loop.elapsed_s == 59.0
    clock.now_s += 2.0
    assert loop.out_of_time


def test_a_failing_step_saves_nothing_and_the_error_surfaces():
    saved = []

    def step(index):
        if index == 2:
            raise FloatingPointError("loss became nan")

    loop = TrainingLoop(LoopConfig(max_steps=9, checkpoint_every=1),
                        lambda n, last: saved.append(n))
    with pytest.raises(FloatingPointError):
        loop.run(step)
    assert saved == [1, 2] and loop.step == 2


def test_a_rank_without_a_checkpoint_steps_alike():
    loop = TrainingLoop(LoopConfig(max_steps=3, checkpoint_every=1), None)
    assert loop.run(lambda index: {"loss": "0.1"}) == 3 and loop.finished


def test_open_run_refuses_a_used_directory_unless_resuming(tmp_path):
    out = tmp_path / "run"
    run = open_run(out, RunSettings(device="cpu", seed=5))
    assert out.is_dir() and not run.resuming and run.rank.main and run.rank.world == 1
    assert run.device == torch.device("cpu") and torch.initial_seed() == 5
    (out / "log.jsonl").write_text("{}\n")
    with pytest.raises(FileExistsError, match="--resume"):
        open_run(out, RunSettings(device="cpu"))
    assert not open_run(out, RunSettings(device="cpu", resume=True)).resuming  # no state yet
    assert not open_run(out, RunSettings(device="cpu", exclusive=False)).resuming
    save_resume_state(out, {"w": torch.ones(2)}, {"step": 3})
    assert open_run(out, RunSettings(device="cpu", resume=True)).resuming


def test_a_local_run_shares_its_directory_and_ignores_torchrun(tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")  # would make open_run join a process group
    (tmp_path / "conditions_train.safetensors").write_bytes(b"")
    with open_local_run(tmp_path, "cpu", 0, seed=9) as run:
        assert run.rank.world == 1 and not run.resuming and torch.initial_seed() == 9


def test_resume_state_round_trips_without_leftovers(tmp_path):
    tensors = {"model.w": torch.arange(6.0).reshape(2, 3), "rng.torch": torch.get_rng_state()}
    save_resume_state(tmp_path, tensors, {"step": 12, "schedule": {"last_epoch": 12}})
    loaded, doc = load_resume_state(tmp_path)
    assert doc == {"step": 12, "schedule": {"last_epoch": 12}}
    assert all(torch.equal(loaded[k], v) for k, v in tensors.items())
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([STATE_JSON, STATE_TENSORS])


def test_json_log_appends_restarts_and_stays_silent_without_a_path(tmp_path):
    path = tmp_path / "log.jsonl"
    log = JsonLog(path)
    log.write({"step": 1})
    log.write({"step": 2})
    assert [json.loads(line)["step"] for line in path.read_text().splitlines()] == [1, 2]
    log.restart([{"step": 1}])
    assert path.read_text() == '{"step": 1}\n'
    JsonLog(None).write({"step": 3})
    JsonLog(None).restart([{"step": 3}])
    assert list(tmp_path.iterdir()) == [path]


def test_loss_summary_over_the_first_and_last_fifty():
    losses = [1.0] * 50 + [0.0] * 10 + [0.5] * 50
    assert loss_summary(losses) == {"loss_first_50": 1.0, "loss_last_50": 0.5}
    assert loss_summary([]) == {"loss_first_50": None, "loss_last_50": None}
