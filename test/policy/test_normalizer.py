"""Min-max normalisation: [min, max] <-> [-1, 1], exact round trips, stats in the state dict."""

import pytest
import torch

from diffusion_policy_ros.policy.normalizer import MinMaxNormalizer, min_max_stats


def _fitted(data: torch.Tensor) -> MinMaxNormalizer:
    norm = MinMaxNormalizer({"action": data.shape[-1]})
    norm.set_stats({"action": min_max_stats(data)})
    return norm


def test_maps_data_range_to_unit_interval_and_back():
    g = torch.Generator().manual_seed(0)
    data = torch.randn(50, 16, 7, generator=g) * torch.linspace(0.01, 3.0, 7) + 2.0
    norm = _fitted(data)
    x = norm.normalize("action", data)
    assert x.min().item() == pytest.approx(-1.0, abs=1e-6)
    assert x.max().item() == pytest.approx(1.0, abs=1e-6)
    assert torch.allclose(x.amin(dim=(0, 1)), -torch.ones(7), atol=1e-6)
    assert torch.allclose(x.amax(dim=(0, 1)), torch.ones(7), atol=1e-6)
    assert torch.allclose(norm.unnormalize("action", x), data, atol=1e-5)
    y = torch.rand(3, 7, generator=g) * 2 - 1
    assert torch.allclose(norm.normalize("action", norm.unnormalize("action", y)), y, atol=1e-6)


def test_constant_dimension_maps_to_minus_one_without_blowing_up():
    data = torch.randn(20, 7)
    data[:, 6] = 0.085
    norm = _fitted(data)
    x = norm.normalize("action", data)
    assert torch.allclose(x[:, 6], -torch.ones(20))
    assert torch.allclose(norm.unnormalize("action", x), data, atol=1e-6)


def test_statistics_travel_in_the_state_dict():
    norm = _fitted(torch.randn(10, 7))
    other = MinMaxNormalizer({"action": 7})
    other.load_state_dict(norm.state_dict())
    x = torch.randn(4, 7)
    assert torch.equal(other.normalize("action", x), norm.normalize("action", x))


@pytest.mark.parametrize("stats, message", [
    ({}, "missing"),
    ({"action": {"min": torch.zeros(6), "max": torch.ones(6)}}, "shape"),
    ({"action": {"min": torch.ones(7), "max": torch.zeros(7)}}, "max >= min"),
    ({"action": {"min": torch.full((7,), float("nan")), "max": torch.ones(7)}}, "finite"),
])
def test_bad_statistics_are_rejected(stats, message):
    with pytest.raises(ValueError, match=message):
        MinMaxNormalizer({"action": 7}).set_stats(stats)
