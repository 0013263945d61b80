"""The one-exp Mish is torch's Mish: values, gradients, reduced precision, extremes."""

from __future__ import annotations

import torch

from diffusion_policy_ros.policy.activations import Mish, mish


def test_values_agree_with_torch_to_float_rounding():
    x = torch.linspace(-100.0, 100.0, 400_001)
    exact = torch.nn.functional.mish(x.double())
    ours = mish(x).double()
    torchs = torch.nn.functional.mish(x).double()
    big = exact.abs() > 1e-6
    relative = ((ours - exact).abs() / exact.abs())[big].max()
    torch_relative = ((torchs - exact).abs() / exact.abs())[big].max()
    assert relative <= 2 * max(float(torch_relative), 2 ** -23)
    assert float((ours - exact).abs()[~big].max()) < 1e-12


def test_gradients_agree_with_torch():
    x = torch.linspace(-30.0, 30.0, 60_001, dtype=torch.float32, requires_grad=True)
    mish(x).sum().backward()
    ours = x.grad.clone()
    x.grad = None
    torch.nn.functional.mish(x.double()).sum().backward()
    torch.testing.assert_close(ours, x.grad.float(), atol=2e-6, rtol=1e-5)


def test_reduced_precision_keeps_its_dtype_and_stays_finite():
    for dtype in (torch.float16, torch.bfloat16):
        x = torch.tensor([-6e4, -100.0, -5.0, 0.0, 5.0, 12.0, 100.0, 6e4]).to(dtype)
        y = mish(x)
        assert y.dtype == dtype and torch.isfinite(y).all()
        torch.testing.assert_close(y.float(), torch.nn.functional.mish(x.float()),
                                   atol=1e-6, rtol=1e-2)


def test_module_is_parameter_free_like_torchs():
    assert list(Mish().state_dict()) == list(torch.nn.Mish().state_dict()) == []
    x = torch.randn(4, 8)
    torch.testing.assert_close(Mish()(x), torch.nn.functional.mish(x))
