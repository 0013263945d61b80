"""A random-cropped 8-channel stem used to corrupt the heap in conv backward (torch 2.13 CPU)."""

import torch

from diffusion_policy_ros.policy.vision import RgbEncoder


def test_random_crop_output_is_contiguous_and_backward_works():
    enc = RgbEncoder((116, 116), base_channels=8, stages=2, token_grid=2, groups=4).train()
    images = torch.rand(4, 3, 128, 128)
    tokens = enc(images)
    tokens.sum().backward()
    assert tokens.shape == (4, 4, 16)
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in enc.parameters())
