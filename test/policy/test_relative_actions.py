"""``relative_actions``: the denoiser models offsets from the newest measured joint state."""

from __future__ import annotations

import torch

from diffusion_policy_ros.policy import features as keys
from diffusion_policy_ros.policy.modeling_diffusion import DiffusionPolicy


def test_chunks_are_offsets_added_to_the_newest_state(make_config, make_batch):
    absolute = DiffusionPolicy(make_config()).eval()
    relative = DiffusionPolicy(make_config(relative_actions=True)).eval()
    relative.load_state_dict(absolute.state_dict())
    batch = make_batch(absolute.config, 3, with_action=False)
    g = lambda: torch.Generator().manual_seed(0)  # noqa: E731
    a = absolute.predict_action_chunk(batch, 2, g())
    r = relative.predict_action_chunk(batch, 2, g())
    torch.testing.assert_close(r, a + batch[keys.STATE][:, -1:, :])


def test_loss_target_is_the_offset(make_config, make_batch):
    policy = DiffusionPolicy(make_config(relative_actions=True))
    batch = make_batch(policy.config, 2)
    offsets = policy.action_offsets(batch, batch[keys.ACTION])
    torch.testing.assert_close(offsets + batch[keys.STATE][:, -1:, :], batch[keys.ACTION])
    plain = DiffusionPolicy(make_config())
    torch.testing.assert_close(plain.action_offsets(batch, batch[keys.ACTION]),
                               batch[keys.ACTION])
