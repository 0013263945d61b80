"""PolicyAgent: the acting loop policy_node, dpr eval and the RL rollouts share (no ROS,
no torch: a stand-in policy draws its chunks from the noise it is handed)."""

import collections
import types

import numpy as np
import pytest

from diffusion_policy_ros.acting.agent import (
    BAD_OBSERVATION,
    DISCARDED,
    NO_INSTRUCTION,
    NON_FINITE_ACTION,
    OBSERVATION_MISMATCH,
    UNREAD_INSTRUCTION,
    Chunk,
    PolicyAgent,
)
from diffusion_policy_ros.acting.grasp_lift import GraspLiftConfig
from diffusion_policy_ros.acting.grasp_rules import GraspRulesConfig, grasp_rules
from diffusion_policy_ros.acting.observation_history import (
    NO_OBSERVATION,
    STALE_OBSERVATION,
    Refusal,
)

from .conftest import retry_config

NAMES = ["joint_1", "joint_2", "joint_3", "joint_4", "joint_5", "joint_6", "gripper_joint"]
DT_S = 0.1
TO = 3


class StandInPolicy:
    """``ChunkPolicy``: the chunk is the newest joint positions, column 0 plus one draw of
    the noise it is handed (a generator's next number, a fixed seed, or 0 for None)."""

    config = types.SimpleNamespace(n_obs_steps=TO, action_dt_s=DT_S)

    def __init__(self, result=None):
        self.calls = []
        self.result = result

    def noise_stream(self, seed: int):
        return np.random.default_rng(seed)

    def predict(self, observations, instruction, noise=None):
        self.calls.append(([o["joint_positions"][0] for o in observations], instruction, noise))
        if isinstance(self.result, Exception):
            raise self.result
        draw = (noise.normal() if isinstance(noise, np.random.Generator)
                else float(noise or 0))
        chunk = np.tile(np.asarray(observations[-1]["joint_positions"], float), (16, 1))
        chunk[:, 0] += draw
        return chunk if self.result is None else self.result


def _observation(k: float, gripper_m: float = 0.06) -> dict:
    """Frame k: its joint_1 is k, so the frames a chunk saw can be read back."""
    return {"image": np.zeros((4, 4, 3), np.uint8), "points": np.zeros((8, 3), np.float32),
            "point_colors": np.zeros((8, 3), np.uint8),
            "joint_positions": np.array([k, 0, 0, 0, 0, 0, gripper_m])}


def _agent(policy=None, rules=None, **kwargs) -> PolicyAgent:
    agent = PolicyAgent(NAMES, **kwargs)
    agent.load(policy or StandInPolicy(), rules)
    return agent


def _ns(stamp_s: float) -> int:
    return int(round(stamp_s * 1e9))


def test_no_chunk_without_an_instruction():
    agent = _agent()
    agent.add_observation(0, _observation(0))
    refusal = agent.act(0)
    assert isinstance(refusal, Refusal) and refusal.reason == NO_INSTRUCTION
    agent.restart("", 0)  # empty words: still none
    agent.add_observation(0, _observation(0))
    assert agent.act(0).reason == NO_INSTRUCTION


def test_no_chunk_without_a_fresh_observation():
    agent = _agent(max_obs_age_s=0.5)
    agent.restart("pick up the red cube", _ns(1.0))
    refusal = agent.act(_ns(1.1))
    assert refusal.reason == NO_OBSERVATION and agent.awaiting_first_frame(_ns(1.1))
    assert not agent.awaiting_first_frame(_ns(1.6))  # longer than max_obs_age_s: a problem
    agent.add_observation(_ns(1.2), _observation(1))
    assert isinstance(agent.act(_ns(1.3)), Chunk)
    assert agent.act(_ns(1.8)).reason == STALE_OBSERVATION


def test_the_frames_selected_by_stamp_are_the_last_to_observations_across_a_restart():
    """Fed one control period apart, on stamps that sum physics steps as the simulation
    does, the agent's To frames are a deque of the last To observations, padded from the
    task's first frame after every restart (dpr eval's loop before the agent)."""
    policy = StandInPolicy()
    agent = _agent(policy)
    stamp_s, deque = 0.0, None
    for k in range(40):
        if k in (0, 17):  # an episode, then an instruction switch
            agent.restart(f"pick up the {'red' if k else 'blue'} cube", _ns(stamp_s))
            deque = collections.deque([k] * TO, maxlen=TO)
        else:
            deque.append(k)
        agent.add_observation(_ns(stamp_s), _observation(k))
        chunk = agent.act(_ns(stamp_s))
        assert isinstance(chunk, Chunk)
        assert policy.calls[-1][0] == list(deque), k
        assert chunk.selection.short == (len(set(deque)) < TO)
        for _ in range(50):  # 50 physics steps of 2 ms
            stamp_s += 0.002
    assert agent.statistics()["history_restarts"] == 2


def test_a_restart_drops_what_came_before_it():
    agent = _agent()
    agent.restart("pick up the red cube", _ns(1.0))
    agent.add_observation(_ns(1.0), _observation(1))
    agent.restart("pick up the blue cube", _ns(2.0))
    agent.add_observation(_ns(1.9), _observation(2))  # stamped before the new task
    assert agent.act(_ns(2.0)).reason == NO_OBSERVATION
    assert agent.statistics()["dropped_before_restart"] == 3  # its joint state, image, cloud


def _chunks(agent: PolicyAgent, n: int, start_s: float = 0.0) -> list[float]:
    out = []
    for k in range(n):
        stamp = _ns(start_s + k * DT_S)
        agent.add_observation(stamp, _observation(0))
        out.append(agent.act(stamp).actions[0, 0])
    return out


def test_the_noise_stream_is_new_every_chunk_and_repeats_with_each_task():
    a, b = _agent(seed=7), _agent(seed=7)
    a.restart("pick up the red cube", 0)
    b.restart("pick up the red cube", 0)
    first = _chunks(a, 4)
    assert len(set(first)) == 4 and first == _chunks(b, 4)  # reproducible for its seed
    a.restart("pick up the red cube", _ns(1.0))  # the same words again: a new task
    assert _chunks(a, 4, 1.0) == first
    a.restart("pick up the red cube", _ns(2.0), seed=8)  # a task of its own seed
    assert _chunks(a, 4, 2.0) != first


@pytest.mark.parametrize("noise, expected", [("fixed", 7), ("fresh", None)])
def test_fixed_and_fresh_noise(noise, expected):
    policy = StandInPolicy()
    agent = _agent(policy, noise=noise, seed=7)
    agent.restart("pick up the red cube", 0)
    _chunks(agent, 3)
    assert [call[2] for call in policy.calls] == [expected] * 3


def test_chunks_pass_unchanged_without_rules():
    policy = StandInPolicy()
    off = GraspRulesConfig()
    agent = _agent(policy, grasp_rules(off.grasp_retry, off.grasp_lift, DT_S), noise="fresh")
    agent.restart("pick up the red cube", 0)
    for k in range(20):  # the gripper reads closed on nothing all along
        agent.add_observation(_ns(k * DT_S), _observation(0, gripper_m=0.0))
        chunk = agent.act(_ns(k * DT_S))
        assert chunk.events == () and np.all(chunk.actions[:, -1] == 0.0)
    assert "grasp_retries_total" not in agent.statistics()


def test_enabled_rules_act_on_the_chunk_and_their_events_are_counted():
    rules = grasp_rules(retry_config(empty_for_s=0.5, open_for_s=1.0, max_retries=1),
                        GraspLiftConfig(), DT_S)
    agent = _agent(StandInPolicy(), rules, noise="fresh")
    agent.restart("pick up the red cube", 0)
    chunks = []
    for k in range(12):
        agent.add_observation(_ns(k * DT_S), _observation(0, gripper_m=0.0))
        chunks.append(agent.act(_ns(k * DT_S)))
    opened = [k for k, c in enumerate(chunks) if c.actions[0, -1] > 0.0]
    assert opened[0] == 5  # closed on nothing for 0.5 s
    assert [(k, e.kind) for k, c in enumerate(chunks) for e in c.events] == [(5, "reopened")]
    assert agent.statistics()["grasp_retries_total"] == 1
    agent.restart("pick up the blue cube", _ns(2.0))  # a new task: the rule starts over
    assert rules.rules[0].retries == 0


def test_a_chunk_whose_task_ended_while_it_was_computed_is_discarded():
    rules = grasp_rules(retry_config(empty_for_s=0.0), GraspLiftConfig(), DT_S)
    agent = _agent(StandInPolicy(), rules)
    agent.restart("pick up the red cube", 0)
    agent.add_observation(0, _observation(0, gripper_m=0.0))
    outcome = agent.act(0, meanwhile=lambda: agent.restart("pick up the blue cube", 1))
    assert outcome.reason == DISCARDED and agent.discarded_after_restart == 1
    assert agent.statistics()["grasp_retries_total"] == 0  # the rules never saw it


@pytest.mark.parametrize("result, reason", [
    (ValueError("observation 0 'image' has shape (4, 4, 3)"), BAD_OBSERVATION),
    (np.full((16, 7), np.nan), NON_FINITE_ACTION)])
def test_what_the_policy_cannot_answer_is_refused(result, reason):
    agent = _agent(StandInPolicy(result))
    agent.restart("pick up the red cube", 0)
    agent.add_observation(0, _observation(0))
    assert agent.act(0).reason == reason


def test_acting_needs_a_loaded_policy():
    agent = PolicyAgent(NAMES)
    agent.restart("pick up the red cube", 0)
    with pytest.raises(RuntimeError, match="no policy loaded"):
        agent.act(0)


class SizedPolicy(StandInPolicy):
    """A checkpoint that states its image size and point count."""

    config = types.SimpleNamespace(n_obs_steps=TO, action_dt_s=DT_S, image_size=[4, 4],
                                   num_points=8)


@pytest.mark.parametrize("change, words", [
    ({"points": np.zeros((5, 3), np.float32), "point_colors": np.zeros((5, 3), np.uint8)},
     ["5 points", "expects 8", "num_points to 8"]),
    ({"image": np.zeros((3, 6, 3), np.uint8)}, ["3x6", "expects 4x4", "image_size to [4, 4]"]),
])
def test_observations_that_do_not_fit_the_checkpoint_are_one_clear_refusal(change, words):
    agent = _agent(SizedPolicy())
    agent.restart("pick up the red cube", 0)
    for k in range(3):
        agent.add_observation(_ns(0.1 * k), {**_observation(k), **change})
        refusal = agent.act(_ns(0.1 * k))
        assert isinstance(refusal, Refusal) and refusal.reason == OBSERVATION_MISMATCH
        assert all(w in refusal.detail for w in words), refusal.detail
    assert agent.policy.calls == []  # the policy never saw them
    what = "num_points" if "points" in change else "image_size"
    assert agent.statistics()[f"dropped_{what}_mismatch"] == 3
    assert not agent.fits_image(np.zeros((3, 6, 3), np.uint8)) or "points" in change
    # The graph reconfigured: fitting frames act again and the mismatch is gone.
    agent.add_observation(_ns(0.3), _observation(3))
    assert isinstance(agent.act(_ns(0.3)), Chunk) and agent.mismatch == ""


def test_words_are_read_before_the_policy_acts_on_them():
    agent = _agent()
    agent.restart("no, the blue one", 0, new_dialogue=True)  # nothing to correct: holds
    agent.add_observation(0, _observation(0))
    refusal = agent.act(0)
    assert refusal.reason == UNREAD_INSTRUCTION and "nothing before it" in refusal.detail
    agent.restart("pick up the red cube", _ns(0.1))
    agent.add_observation(_ns(0.1), _observation(1))
    assert isinstance(agent.act(_ns(0.1)), Chunk)
    agent.restart("no, the blue one", _ns(0.2))  # a correction: the object in force
    agent.add_observation(_ns(0.2), _observation(2))
    assert isinstance(agent.act(_ns(0.2)), Chunk)
    assert agent.policy.calls[-1][1] == "pick up the blue cube"
    assert agent.words == "no, the blue one"
    agent.restart("pick up the screwdriver", _ns(0.3))  # names nothing it knows: holds
    agent.add_observation(_ns(0.3), _observation(3))
    assert agent.act(_ns(0.3)).reason == UNREAD_INSTRUCTION
    # Without reading, any words go to the policy as said.
    raw = _agent(read_instructions=False)
    raw.restart("pick up the screwdriver", 0)
    raw.add_observation(0, _observation(0))
    assert isinstance(raw.act(0), Chunk) and raw.policy.calls[-1][1] == "pick up the screwdriver"
