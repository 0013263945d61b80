"""Learnable N:M layer pruning of the DiT (policy/pruning.py) on tiny transformers."""

import math

import pytest
import torch
import yaml

from diffusion_policy_ros.config import ConfigError, config_from_params
from diffusion_policy_ros.learning.prune_config import PruneConfig, load_prune_config
from diffusion_policy_ros.policy.dit import DiffusionTransformer
from diffusion_policy_ros.policy.modeling_diffusion import DiffusionPolicy
from diffusion_policy_ros.policy.pruning import (
    GatedDiT,
    NMPattern,
    block_importance,
    candidate_masks,
    importance_distribution,
    prune_policy,
    select_positions,
)


def make_dit(layers=8, seed=0, keep=None):
    """A tiny DiT whose blocks are not the identity (adaLN-Zero starts every block as one)."""
    torch.manual_seed(seed)
    dit = DiffusionTransformer(7, 16, 8, width=16, heads=2, mlp_ratio=2.0,
                               layers=keep or list(range(layers)), timestep_dim=16)
    with torch.no_grad():
        for p in dit.parameters():
            if not p.abs().sum():
                p.normal_(0.0, 0.3)
    return dit


def inputs(batch=5, seed=1):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(batch, 8, 7, generator=g), torch.randint(0, 100, (batch,), generator=g),
            torch.randn(batch, 16, generator=g))


def test_svd_importance_is_the_normalised_nuclear_norm_of_qkv_and_mlp():
    dit = make_dit()
    block = dit.blocks["3"]
    q, k, v = block.qkv.weight.split(16, dim=0)
    expected = sum(float(torch.linalg.matrix_norm(w.detach(), ord="nuc"))
                   for w in (q, k, v, block.mlp[0].weight, block.mlp[2].weight))
    assert block_importance(block) == pytest.approx(expected, rel=1e-5)
    with torch.no_grad():
        block.mlp[0].weight.mul_(3.0)
    p = importance_distribution(dit)
    assert p.sum() == pytest.approx(1.0) and (p > 0).all()
    assert int(p.argmax()) == 3


def test_gate_logits_start_at_log_p_and_subsets_at_the_product_of_p():
    dit = make_dit()
    gated = GatedDiT(dit, NMPattern(3, 4))
    p = importance_distribution(dit)
    assert torch.allclose(gated.gate_logits, p.log().float())
    probs = gated.subset_logits().softmax(dim=-1)
    masks = candidate_masks(NMPattern(3, 4))
    for group in range(2):
        weights = torch.stack([p[group * 4:(group + 1) * 4][m.bool()].prod() for m in masks])
        assert torch.allclose(probs[group], (weights / weights.sum()).float(), atol=1e-6)


@pytest.mark.parametrize("text, n, m", [("3:4", 3, 4), ("2:4", 2, 4), ("1:2", 1, 2)])
def test_gumbel_gates_keep_exactly_n_of_every_m(text, n, m):
    pattern = NMPattern.parse(text)
    gated = GatedDiT(make_dit(), pattern)
    assert candidate_masks(pattern).shape == (math.comb(m, n), m)
    gated.tau = 0.5
    gates = gated.sample_gates(2000)
    assert set(gates.unique().tolist()) == {0.0, 1.0}
    assert (gates.view(2000, -1, m).sum(dim=-1) == n).all()
    # Every subset of a group gets drawn, at about its softmax probability.
    pattern_ids = (gates.view(2000, -1, m)[:, 0] * 2 ** torch.arange(m)).sum(dim=-1)
    assert len(pattern_ids.unique()) == math.comb(m, n)
    # Straight-through: the hard forward pass still hands the gate logits a gradient.
    (gates * torch.arange(gates.shape[1])).sum().backward()
    assert gated.gate_logits.grad.abs().sum() > 0


def test_the_most_probable_subset_dominates_the_draws():
    gated = GatedDiT(make_dit(), NMPattern(2, 4),
                     init_logits=torch.tensor([0.0, 5.0, 0.0, 5.0, 5.0, 0.0, 5.0, 0.0]))
    gates = gated.sample_gates(500)
    expected = torch.tensor([0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0])
    assert (gates == expected).all(dim=1).float().mean() > 0.9
    assert gated.selected_layers() == [1, 3, 4, 6]


def test_a_dropped_block_is_the_identity():
    dit = make_dit()
    sample, t, cond = inputs()
    gated = GatedDiT(dit, NMPattern(3, 4)).eval()
    mask = torch.tensor([1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0, 1.0])
    kept = [0, 2, 3, 4, 5, 7]
    smaller = make_dit(keep=kept)
    smaller.load_state_dict({k: v for k, v in dit.state_dict().items()
                             if k in smaller.state_dict()})
    with torch.no_grad():
        assert torch.equal(gated(sample, t, cond, mask=mask), smaller(sample, t, cond))
        full = dit(sample, t, cond)  # the hooks are idle outside GatedDiT.forward
        assert torch.equal(gated(sample, t, cond, mask=torch.ones(8)), full)
        assert not torch.allclose(full, smaller(sample, t, cond))
        # Per-sample masks: each row of the batch as its own mask alone.
        rows = torch.stack([mask, torch.ones(8)] + [mask] * 3)
        assert torch.equal(gated(sample, t, cond, mask=rows)[1], full[1])


def test_eval_mode_applies_the_selection_and_training_mode_draws():
    gated = GatedDiT(make_dit(), NMPattern(2, 4),
                     init_logits=torch.tensor([3.0, 2.0, 1.0, 0.0, 0.0, 1.0, 2.0, 3.0]))
    sample, t, cond = inputs()
    with torch.no_grad():
        selected = gated.eval()(sample, t, cond)
        mask = torch.tensor([1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0])
        assert torch.equal(selected, gated(sample, t, cond, mask=mask))
    torch.manual_seed(0)
    outputs = {gated.train()(sample, t, cond).sum().item() for _ in range(20)}
    assert len(outputs) > 1


def test_select_positions_keeps_the_highest_gates_of_every_group():
    logits = torch.tensor([0.1, 0.9, 0.5, 0.3, 2.0, -1.0, 2.0, 0.0])
    assert select_positions(logits, NMPattern(3, 4)) == [1, 2, 3, 4, 6, 7]
    assert select_positions(logits, NMPattern(2, 4)) == [1, 2, 4, 6]
    assert select_positions(torch.zeros(4), NMPattern(2, 4)) == [0, 1]  # ties: earlier


def test_selected_layers_are_original_indices():
    dit = make_dit(keep=[0, 2, 3, 5])
    gated = GatedDiT(dit, NMPattern(1, 2), init_logits=torch.tensor([0.0, 1.0, 1.0, 0.0]))
    assert gated.selected_layers() == [2, 3]


@pytest.mark.parametrize("text, message", [
    ("3-4", "expected two integers such as '3:4'"),
    ("three:4", "expected two integers"),
    ("4:4", "needs 1 <= N < M"),
    ("0:4", "needs 1 <= N < M"),
    ("5:4", "needs 1 <= N < M"),
])
def test_nm_patterns_are_checked_with_clear_messages(text, message):
    with pytest.raises(ValueError, match=message):
        NMPattern.parse(text)


def test_a_pattern_that_does_not_tile_the_blocks_is_refused():
    with pytest.raises(ValueError, match="6 blocks do not split into groups of M = 4"):
        GatedDiT(make_dit(layers=6), NMPattern(3, 4))
    assert NMPattern(3, 4).kept(8) == 6 and NMPattern(2, 4).kept(8) == 4


def test_prune_config_errors_are_clear(tmp_path):
    with pytest.raises(ConfigError, match="PruneConfig: N:M pattern 4:2: needs 1 <= N < M"):
        config_from_params(PruneConfig, {"pattern": "4:2"})
    path = tmp_path / "prune.yaml"
    path.write_text("pattern: 3:4\n")  # unquoted: YAML 1.1 reads base 60
    assert yaml.safe_load(path.read_text())["pattern"] == 184
    with pytest.raises(ConfigError, match='in quotes, e.g. pattern: "3:4"'):
        load_prune_config(path)
    assert load_prune_config().nm == NMPattern(3, 4)


def test_prune_policy_keeps_the_listed_blocks_with_their_weights(make_config):
    torch.manual_seed(0)
    policy = DiffusionPolicy(make_config(denoiser="dit", dit_layers=4))
    pruned = prune_policy(policy, [3, 1])
    assert pruned.config.keep_layers == [1, 3] and list(pruned.denoiser.blocks) == ["1", "3"]
    source = policy.state_dict()
    for key, value in pruned.state_dict().items():
        assert torch.equal(value, source[key]), key
    assert len(source) > len(pruned.state_dict())
    with pytest.raises(ValueError, match=r"blocks \[2\] are not in the policy"):
        prune_policy(pruned, [1, 2])
    with pytest.raises(ValueError, match="needs a DiT denoiser"):
        prune_policy(DiffusionPolicy(make_config()), [0])
