"""Language-to-point grounding: a softmax over the cloud that learns which colour a word means."""

import pytest
import torch

from diffusion_policy_ros.policy import features as keys
from diffusion_policy_ros.policy.grounding import LanguagePointGrounding
from diffusion_policy_ros.policy.modeling_diffusion import DiffusionPolicy

COLOURS = torch.tensor([[0.85, 0.1, 0.1], [0.1, 0.7, 0.15], [0.1, 0.25, 0.9]])


def blob_scenes(n: int, generator: torch.Generator, points_per_blob: int = 40):
    """n clouds of three coloured blobs at random places on a grey table; a random one
    is named (its 'instruction' embedding is a fixed random vector per colour)."""
    words = torch.randn(3, 16, generator=torch.Generator().manual_seed(99))
    table = 100
    xyz, rgb, named, centres = [], [], [], []
    for _ in range(n):
        where = torch.rand(3, 2, generator=generator) * 1.6 - 0.8
        pts = [torch.cat([torch.rand(table, 2, generator=generator) * 2 - 1,
                          torch.full((table, 1), -1.0)], 1)]
        cols = [torch.full((table, 3), 0.5)]
        for k in range(3):
            offset = (torch.rand(points_per_blob, 3, generator=generator) - 0.5) * 0.1
            pts.append(torch.cat([where[k], torch.tensor([-0.9])]) + offset)
            cols.append(COLOURS[k].expand(points_per_blob, 3))
        k = int(torch.randint(3, (), generator=generator))
        xyz.append(torch.cat(pts))
        rgb.append(torch.cat(cols))
        named.append(words[k])
        centres.append(where[k])
    return torch.stack(xyz), torch.stack(rgb), torch.stack(named), torch.stack(centres)


def test_weights_are_a_distribution_and_the_result_ignores_point_order():
    torch.manual_seed(0)
    grounding = LanguagePointGrounding(16, key_dim=8, shape_dim=8)
    xyz, rgb, words, _ = blob_scenes(4, torch.Generator().manual_seed(0))
    centre, shape, weights = grounding(xyz, rgb, words)
    assert centre.shape == (4, 3) and shape.shape == (4, 8) and weights.shape == xyz.shape[:2]
    torch.testing.assert_close(weights.sum(1), torch.ones(4))
    assert (centre >= xyz.amin(1) - 1e-6).all() and (centre <= xyz.amax(1) + 1e-6).all()
    order = torch.randperm(xyz.shape[1])
    again = grounding(xyz[:, order], rgb[:, order], words)
    torch.testing.assert_close(again[0], centre)
    torch.testing.assert_close(again[1], shape)


def test_learns_which_colour_a_word_names_and_finds_it_in_unseen_scenes():
    torch.manual_seed(0)
    grounding = LanguagePointGrounding(16, key_dim=16, shape_dim=8)
    optimiser = torch.optim.AdamW(grounding.parameters(), 1e-2)
    train = torch.Generator().manual_seed(1)
    for _ in range(150):
        xyz, rgb, words, where = blob_scenes(16, train)
        loss = (grounding(xyz, rgb, words)[0][:, :2] - where).square().mean()
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    xyz, rgb, words, where = blob_scenes(64, torch.Generator().manual_seed(2))
    with torch.no_grad():
        error = (grounding(xyz, rgb, words)[0][:, :2] - where).norm(dim=1)
    # Blobs are 0.1 wide and at least ~0.3 apart on average: a wrong pick is off by far more.
    assert error.median() < 0.03, error.median()
    assert (error < 0.1).float().mean() > 0.95


def test_policy_with_grounding_starts_as_without_and_trains_the_centre(make_config, make_batch):
    with pytest.raises(ValueError, match="target_grounding"):
        make_config(target_aux_weight=1.0).validate()
    torch.manual_seed(0)
    plain = DiffusionPolicy(make_config()).eval()
    torch.manual_seed(0)
    grounded = DiffusionPolicy(make_config(target_grounding=True, grounding_dim=8,
                                           target_aux_weight=1.0)).train()
    grounded.load_state_dict(plain.state_dict(), strict=False)
    batch = make_batch(plain.config, 4)
    # The projection into the condition starts at zero: same condition as without it.
    torch.testing.assert_close(grounded.eval().encode_observation(batch),
                               plain.encode_observation(batch))
    grounded.train()
    noise = torch.randn(4, plain.config.horizon, plain.config.action_dim)
    steps = torch.tensor([1, 10, 50, 99])
    torch.manual_seed(0)
    unlabelled = grounded.compute_loss(batch, noise, steps)
    far = {keys.GRASP_POSITION: torch.full((4, 3), 5.0)}
    torch.manual_seed(0)
    labelled = grounded.compute_loss({**batch, **far}, noise, steps)
    assert labelled > unlabelled  # the centre lies inside the cloud, far from (5, 5) m
    torch.manual_seed(0)
    near = {**far, keys.GRASP_APPROACH: torch.zeros(4)}  # tool already at the grasp
    torch.testing.assert_close(grounded.compute_loss({**batch, **near}, noise, steps),
                               unlabelled)
    torch.manual_seed(0)  # before an instruction switch: labels of another object, unused
    switched = {**far, keys.GRASP_LABEL_WEIGHT: torch.zeros(4)}
    torch.testing.assert_close(grounded.compute_loss({**batch, **switched}, noise, steps),
                               unlabelled)
    labelled.backward()
    assert grounded.grounding.key[0].weight.grad.abs().sum() > 0
    assert grounded.grounding.query.weight.grad.abs().sum() > 0
