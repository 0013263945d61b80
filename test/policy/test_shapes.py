"""Shapes and structural properties of the encoders, fusion and both denoisers."""

import pytest
import torch
from torch import nn

from diffusion_policy_ros.policy import features as keys
from diffusion_policy_ros.policy.configuration_diffusion import load_policy_config
from diffusion_policy_ros.policy.dit import DiffusionTransformer, DiTBlock
from diffusion_policy_ros.policy.modeling_diffusion import DiffusionPolicy, make_denoiser
from diffusion_policy_ros.policy.pointnet import PointNetEncoder, farthest_point_indices
from diffusion_policy_ros.policy.unet1d import TemporalConv1d
from diffusion_policy_ros.policy.vision import RgbEncoder, center_crop, random_crop


@pytest.mark.parametrize("denoiser", ["unet", "dit"])
def test_policy_loss_and_chunk_shapes(denoiser, make_config, make_batch):
    torch.manual_seed(0)
    config = make_config(denoiser=denoiser)
    policy = DiffusionPolicy(config)
    batch = make_batch(config, 3)
    loss = policy.compute_loss(batch)
    assert loss.shape == () and loss.dtype == torch.float32 and loss.requires_grad
    loss.backward()
    policy.eval()
    policy.check_observation(batch)
    cond = policy.encode_observation(batch)
    assert cond.shape == (3, config.cond_dim)
    chunk = policy.predict_action_chunk(batch, num_inference_steps=3)
    assert chunk.shape == (3, config.horizon, config.action_dim)
    assert torch.isfinite(chunk).all()


def test_sample_prediction_trains_on_the_clean_chunk(make_config, make_batch):
    torch.manual_seed(0)
    policy = DiffusionPolicy(make_config(prediction_type="sample"))
    batch = make_batch(policy.config, 2)
    assert policy.training_scheduler.config.prediction_type == "sample"
    assert policy.sampling_scheduler.config.prediction_type == "sample"
    assert policy.compute_loss(batch).item() > 0
    chunk = policy.eval().predict_action_chunk(batch, num_inference_steps=2)
    assert chunk.shape == (2, 16, 7)


@pytest.mark.parametrize("denoiser", ["unet", "dit"])
def test_denoiser_maps_chunk_to_chunk(denoiser, make_config):
    config = make_config(denoiser=denoiser, horizon=8)
    net = make_denoiser(config)
    x = torch.randn(5, 8, config.action_dim)
    out = net(x, torch.tensor([0, 3, 50, 99, 7]), torch.randn(5, config.cond_dim))
    assert out.shape == x.shape
    assert net(x, 4, torch.randn(5, config.cond_dim)).shape == x.shape


def test_observation_shape_errors_name_the_key(make_config, make_batch):
    config = make_config()
    policy = DiffusionPolicy(config)
    batch = make_batch(config, 2, with_action=False)
    batch[keys.POINTS_XYZ] = batch[keys.POINTS_XYZ][:, :, :10]
    with pytest.raises(ValueError, match="observation.points_xyz"):
        policy.check_observation(batch)
    del batch[keys.LANGUAGE]
    with pytest.raises(ValueError, match="lacks \\['observation.language'\\]"):
        policy.encode_observation(batch)


@pytest.mark.parametrize("stride, kernel, padding", [(1, 5, 2), (2, 3, 1), (1, 1, 0)])
def test_temporal_conv_equals_conv1d(stride, kernel, padding):
    torch.manual_seed(0)
    ours = TemporalConv1d(12, 20, kernel, stride=stride, padding=padding)
    ref = nn.Conv1d(12, 20, kernel, stride=stride, padding=padding)
    ref.load_state_dict(ours.state_dict())
    x = torch.randn(3, 12, 16)
    assert torch.allclose(ours(x), ref(x), atol=1e-5)


def test_crops_and_rgb_tokens():
    images = torch.rand(6, 3, 32, 32)
    assert random_crop(images, (28, 24)).shape == (6, 3, 28, 24)
    assert torch.equal(center_crop(images, (28, 28)), images[..., 2:30, 2:30])
    torch.manual_seed(0)
    enc = RgbEncoder((28, 28), base_channels=8, stages=2, token_grid=2, groups=4)
    assert enc.eval()(images).shape == (6, 4, 16)
    assert torch.equal(enc(images), enc(images))
    enc.train()
    assert not torch.equal(enc(images), enc(images))


def test_point_tokens_pool_voronoi_cells():
    g = torch.Generator().manual_seed(0)
    xyz = torch.rand(4, 100, 3, generator=g) * 2 - 1
    idx = farthest_point_indices(xyz, 5)
    assert idx.shape == (4, 5) and (idx[:, 0] == 0).all()
    assert all(len(set(row.tolist())) == 5 for row in idx)
    enc = PointNetEncoder(32, num_tokens=5, use_rgb=True)
    tokens, centres = enc(xyz, torch.rand(4, 100, 3, generator=g))
    assert tokens.shape == (4, 6, 32) and centres.shape == (4, 5, 3)
    assert torch.allclose(tokens[:, 0], tokens[:, 1:].amax(dim=1))


def test_exported_point_encoder_pools_with_masked_max_pools_and_the_same_numbers():
    """torch.export records the K masked max-pools (what Inductor fuses into one pass),
    not the training path's scatter_reduce, and they give the same tokens."""
    g = torch.Generator().manual_seed(2)
    xyz, rgb = torch.rand(1, 200, 3, generator=g), torch.rand(1, 200, 3, generator=g)
    enc = PointNetEncoder(32, num_tokens=4, use_rgb=True).eval()
    with torch.no_grad():
        program = torch.export.export(enc, (xyz, rgb))
        targets = {str(node.target) for node in program.graph.nodes}
        assert not any("scatter_reduce" in t for t in targets)
        for got, want in zip(program.module()(xyz, rgb), enc(xyz, rgb), strict=True):
            assert torch.equal(got, want)


def test_language_film_starts_as_the_plain_encoder_and_then_depends_on_the_instruction():
    g = torch.Generator().manual_seed(1)
    xyz, rgb = torch.rand(3, 64, 3, generator=g), torch.rand(3, 64, 3, generator=g)
    plain = PointNetEncoder(32, num_tokens=4, use_rgb=True)
    film = PointNetEncoder(32, num_tokens=4, use_rgb=True, condition_dim=10)
    missing = film.load_state_dict(plain.state_dict(), strict=False).missing_keys
    assert missing and all(k.startswith("films.") for k in missing)
    red, blue = torch.randn(1, 10, generator=g).expand(3, 10), torch.randn(3, 10, generator=g)
    assert torch.equal(film(xyz, rgb, red)[0], plain(xyz, rgb)[0])
    with pytest.raises(ValueError, match="FiLM"):
        film(xyz, rgb)
    for layer in film.films:
        torch.nn.init.normal_(layer.weight, std=0.1)
    assert not torch.allclose(film(xyz, rgb, red)[0], film(xyz, rgb, blue)[0])


def test_dit_blocks_start_as_identity_and_keep_their_indices(make_config):
    block = DiTBlock(32, 2, 4.0)
    x = torch.randn(2, 16, 32)
    assert torch.equal(block(x, torch.randn(2, 32)), x)
    full = make_denoiser(make_config(denoiser="dit", dit_layers=4))
    pruned = make_denoiser(make_config(denoiser="dit", dit_layers=4, keep_layers=[0, 3]))
    assert isinstance(pruned, DiffusionTransformer)
    assert list(pruned.blocks) == ["0", "3"]
    pruned_keys = set(pruned.state_dict())
    assert pruned_keys < set(full.state_dict())
    pruned.load_state_dict({k: v for k, v in full.state_dict().items() if k in pruned_keys})


@pytest.mark.parametrize("name, max_params", [("policy_unet", 8e6), ("policy_dit", 8e6)])
def test_shipped_policies_stay_small(name, max_params):
    counts = DiffusionPolicy(load_policy_config(name)).parameter_counts()
    assert counts["total"] < max_params
    assert counts["total"] == sum(v for k, v in counts.items() if k != "total")


def test_grasp_head_only_with_a_weight_and_its_loss_only_with_the_label(make_config, make_batch):
    assert DiffusionPolicy(make_config()).grasp_head is None
    policy = DiffusionPolicy(make_config(grasp_aux_weight=0.5)).train()
    assert policy.parameter_counts()["grasp_head"] > 0
    batch = make_batch(policy.config, 4)
    noise = torch.randn(4, policy.config.horizon, policy.config.action_dim)
    steps = torch.tensor([1, 10, 50, 99])
    torch.manual_seed(0)
    plain = policy.compute_loss(batch, noise, steps)
    torch.manual_seed(0)
    label = {keys.GRASP_STATE: torch.full((4, 7), 3.0)}
    labelled = policy.compute_loss({**batch, **label}, noise, steps)
    assert labelled > plain  # the head cannot predict a state far outside the data yet
    labelled.backward()
    assert policy.grasp_head[0].weight.grad.abs().sum() > 0
