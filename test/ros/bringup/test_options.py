"""``dpr bringup``'s options: bad ones refused with the reason (exit status 2)."""

import pytest

from diffusion_policy_ros.ros.bringup import options, runner
from diffusion_policy_ros.ros.bringup.options import BringupError, Options


@pytest.mark.parametrize("opts, match", [
    (Options(episodes=0), "at least 1"),
    (Options(namespace="arm left"), "not a ROS namespace"),
    (Options(episodes=2, sim=False), "needs the simulation"),
    (Options(seed=0), "at least 1"),
    (Options(instruction="  "), "empty"),
    (Options(switch_after_s=1.0), "needs --episodes"),
    (Options(episodes=1, switch_after_s=1.0, instruction="grab the red cube"), "exclude"),
    (Options(episodes=1, switch_after_s=0.0), "> 0 s"),
    (Options(sim_params=["time_limit_s=5"]), "KEY:=VALUE"),
    (Options(checkpoint="/nonexistent/ckpt"), "no such directory"),
    (Options(params_files=["/nonexistent/mine.yaml"]), "mine.yaml cannot be read"),
    (Options(max_restarts=-1), "must be >= 0"),
])
def test_bad_options_are_refused(opts, match, tmp_path):
    if opts.checkpoint is None:
        opts.checkpoint = str(tmp_path)
    with pytest.raises(BringupError, match=match):
        options.validate(opts)


def test_missing_default_checkpoint_says_what_to_pass(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(options, "SHIPPED_CHECKPOINT", tmp_path / "absent")
    with pytest.raises(BringupError, match="--checkpoint"):
        options.resolve_checkpoint(None)
    assert runner.run(Options(episodes=1)) == 2
    assert "--checkpoint" in capsys.readouterr().err

