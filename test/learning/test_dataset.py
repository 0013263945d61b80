"""Training samples: the grasp-state label of the auxiliary loss."""

from pathlib import Path

import numpy as np

from diffusion_policy_ros.learning.dataset import grasp_state
from diffusion_policy_ros.learning.episode_bag import EpisodeRecord


def _episode(gripper_commands):
    n = len(gripper_commands)
    actions = np.zeros((n, 16, 7))
    actions[:, :, 6] = np.asarray(gripper_commands)[:, None]
    joints = np.arange(n, dtype=np.float64)[:, None] * np.ones((1, 7))
    return EpisodeRecord(Path("x"), "pick up the red cube", {}, np.arange(n),
                         np.zeros((n, 2, 2, 3)), np.zeros((n, 4, 3)), np.zeros((n, 4, 3)),
                         joints, actions, "chunks")


def test_grasp_state_is_where_the_gripper_command_first_closes():
    state = grasp_state(_episode([0.085, 0.085, 0.085, 0.03, 0.0, 0.0]))
    assert state.dtype == np.float32 and state.tolist() == [3.0] * 7
    assert grasp_state(_episode([0.085] * 4)).tolist() == [3.0] * 7  # never closed: last


def test_early_frames_are_repeated_in_the_index():
    from diffusion_policy_ros.learning.dataset import EpisodeDataset
    from diffusion_policy_ros.policy.configuration_diffusion import DiffusionPolicyConfig

    episodes = [_episode([0.085] * 10), _episode([0.085] * 3)]
    embeddings = {"pick up the red cube": np.zeros(384)}
    plain = EpisodeDataset(episodes, DiffusionPolicyConfig(), embeddings)
    assert len(plain) == 13
    early = EpisodeDataset(episodes, DiffusionPolicyConfig(), embeddings, early_frames=4,
                           early_frame_repeat=3)
    assert len(early) == 13 + 2 * (4 + 3)  # the 3-frame episode has only 3 early frames
    assert early.index.count((0, 0)) == 3 and early.index.count((0, 5)) == 1


def test_colour_swap_changes_colours_and_the_instruction_together():
    import torch

    from diffusion_policy_ros.learning.augmentation import ColourSwap
    from diffusion_policy_ros.learning.dataset import EpisodeDataset
    from diffusion_policy_ros.policy import features as keys
    from diffusion_policy_ros.policy.configuration_diffusion import DiffusionPolicyConfig

    swap = ColourSwap({"red": (0.85, 0.1, 0.1), "blue": (0.1, 0.25, 0.9)}, [["red", "blue"]])
    ep = _episode([0.085] * 3)
    ep.images[:] = np.array([217, 25, 25], np.uint8)  # every pixel red
    variants = swap.instruction_variants(ep.instruction)
    assert variants == {"pick up the red cube", "pick up the blue cube"}
    embeddings = {t: np.full(384, i, np.float32) for i, t in enumerate(sorted(variants))}
    data = EpisodeDataset([ep], DiffusionPolicyConfig(), embeddings, colour_swap=swap,
                          colour_swap_prob=1.0)
    torch.manual_seed(0)
    seen = set()
    for _ in range(20):
        sample = data[0]
        blue = bool(sample[keys.IMAGE][0, 2, 0, 0] > sample[keys.IMAGE][0, 0, 0, 0])
        text = sorted(variants)[int(sample[keys.LANGUAGE][0])]
        assert blue == ("blue" in text)
        seen.add(blue)
    assert seen == {True, False}


def test_grasp_position_is_the_tool_at_the_grasp_state():
    from diffusion_policy_ros.learning.dataset import EpisodeDataset, tool_positions
    from diffusion_policy_ros.policy import features as keys
    from diffusion_policy_ros.policy.configuration_diffusion import DiffusionPolicyConfig
    from diffusion_policy_ros.sim.ik import TcpIk
    from diffusion_policy_ros.sim.scene import HOME_ARM_Q_RAD, load_model

    home = np.append(HOME_ARM_Q_RAD, 0.04)
    expected = TcpIk(load_model()).forward(HOME_ARM_Q_RAD)[0]
    np.testing.assert_allclose(tool_positions([home])[0], expected, atol=1e-6)
    assert tool_positions([]).shape == (0, 3)
    ep = _episode([0.085, 0.085, 0.0])
    ep.joint_positions[:] = home
    data = EpisodeDataset([ep], DiffusionPolicyConfig(), {ep.instruction: np.zeros(384)})
    np.testing.assert_allclose(data[1][keys.GRASP_POSITION].numpy(), expected, atol=1e-6)


def test_grounding_loss_counts_only_frames_before_the_tool_reaches_the_grasp():
    from diffusion_policy_ros.learning.dataset import EpisodeDataset
    from diffusion_policy_ros.policy import features as keys
    from diffusion_policy_ros.policy.configuration_diffusion import DiffusionPolicyConfig
    from diffusion_policy_ros.sim.scene import HOME_ARM_Q_RAD

    ep = _episode([0.085, 0.085, 0.085, 0.0])
    ep.joint_positions[:] = np.append(HOME_ARM_Q_RAD, 0.04)
    ep.joint_positions[:2, 0] += 0.5  # joint_1 turned: the tool ~20 cm from the grasp
    data = EpisodeDataset([ep], DiffusionPolicyConfig(), {ep.instruction: np.zeros(384)})
    assert [float(data[i][keys.GRASP_APPROACH]) for i in range(4)] == [1.0, 1.0, 0.0, 0.0]


def test_relative_actions_normalise_offsets_from_the_state_of_each_frame():
    from diffusion_policy_ros.learning.dataset import EpisodeDataset
    from diffusion_policy_ros.policy.configuration_diffusion import DiffusionPolicyConfig
    from diffusion_policy_ros.policy.features import ACTION

    episode = _episode([0.085] * 5)
    episode.actions[:] = episode.joint_positions[:, None, :] + np.linspace(0, 0.3, 16)[:, None]
    embeddings = {"pick up the red cube": np.zeros(384)}
    absolute = EpisodeDataset([episode], DiffusionPolicyConfig(), embeddings).normalizer_stats()
    relative = EpisodeDataset([episode], DiffusionPolicyConfig(relative_actions=True),
                              embeddings).normalizer_stats()
    np.testing.assert_allclose(absolute[ACTION]["min"], 0.0, atol=1e-6)
    np.testing.assert_allclose(absolute[ACTION]["max"], 4.3, atol=1e-6)  # state 4 + 0.3
    np.testing.assert_allclose(relative[ACTION]["min"], 0.0, atol=1e-6)
    np.testing.assert_allclose(relative[ACTION]["max"], 0.3, atol=1e-6)


def test_frames_before_an_instruction_switch_use_it_and_skip_the_grasp_labels():
    from diffusion_policy_ros.learning.dataset import EpisodeDataset, episode_instructions
    from diffusion_policy_ros.policy import features as keys
    from diffusion_policy_ros.policy.configuration_diffusion import DiffusionPolicyConfig

    ep = _episode([0.085, 0.085, 0.085, 0.0])
    ep.frame_instructions = ["grab the blue cube"] * 2 + [ep.instruction] * 2
    texts = episode_instructions([ep])
    assert texts == {"grab the blue cube", "pick up the red cube"}
    embeddings = {t: np.full(384, float(len(t))) for t in texts}
    data = EpisodeDataset([ep], DiffusionPolicyConfig(), embeddings)
    assert [float(data[i][keys.LANGUAGE][0]) for i in range(4)] == [18.0, 18.0, 20.0, 20.0]
    assert [float(data[i][keys.GRASP_LABEL_WEIGHT]) for i in range(4)] == [0.0, 0.0, 1.0, 1.0]


def test_tool_positions_from_the_urdf_are_the_simulator_s():
    """The grounding labels and the policy's kinematics come from the robot description, not
    from MuJoCo: the same float32 numbers as the MJCF's tool centre point."""
    import torch

    from diffusion_policy_ros.learning.dataset import arm_chain, tool_positions
    from diffusion_policy_ros.policy.kinematics import SerialChainKinematics
    from diffusion_policy_ros.sim.ik import TcpIk, arm_tool_chain
    from diffusion_policy_ros.sim.scene import HOME_ARM_Q_RAD, load_model

    rng = np.random.default_rng(3)
    q = np.concatenate([np.zeros((1, 6)), HOME_ARM_Q_RAD[None],
                        rng.uniform(-np.pi, np.pi, (30, 6))])
    states = np.concatenate([q, np.full((len(q), 1), 0.04)], axis=1)  # + gripper opening
    ik = TcpIk(load_model())
    expected = np.array([ik.forward(row)[0] for row in q], np.float32)
    np.testing.assert_array_equal(tool_positions(states), expected)
    urdf, mjcf = SerialChainKinematics(6), SerialChainKinematics(6)
    urdf.set_chain(arm_chain())
    mjcf.set_chain(arm_tool_chain())
    qt = torch.as_tensor(q, dtype=torch.float32)
    torch.testing.assert_close(urdf(qt), mjcf(qt), atol=1e-6, rtol=0)
