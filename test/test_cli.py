"""The dpr command parses every subcommand it documents."""

import shlex
from pathlib import Path

import pytest

from diffusion_policy_ros.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("argv", [["bench", "perception", "--frames", "3"], ["bench", "tracker"],
                                  ["bench", "blending"], ["bench", "tick"],
                                  ["bench", "policy", "--repeats", "3"],
                                  ["bench", "tracking", "--episodes", "2"],
                                  ["collect", "--episodes", "1", "--out", "x"],
                                  ["collect", "--episodes", "1", "--out", "x",
                                   "--object-set", "varied"],
                                  ["eval", "--object-set", "varied", "--instructions",
                                   "description"],
                                  ["collect", "--episodes", "1", "--out", "x", "--switches",
                                   "--recover-from", "c"],
                                  ["eval", "--depth-noise", "--instructions", "switch",
                                   "--noise", "fixed"],
                                  ["train", "--data", "d", "--config", "c", "--out", "o"],
                                  ["eval", "--checkpoint", "c", "--episodes", "2"],
                                  ["eval", "--ros", "--episodes", "2", "--seed", "5", "--out",
                                   "o"],
                                  ["eval-expert", "--episodes", "2"],
                                  ["probe", "--checkpoint", "c", "--data", "d", "--train"],
                                  ["replay", "--bag", "b", "--checkpoint", "c", "--report", "r",
                                   "--force"],
                                  ["replay", "--bag", "b", "--publish", "--rate", "2.0",
                                   "--no-clock", "--topics", "joint_states", "instruction"],
                                  ["sync-demo", "--seconds", "1"],
                                  ["table-floor", "--bag", "b", "--frames", "5",
                                   "--leak-per-frame", "0.1", "--report", "r"],
                                  ["finetune", "--out", "o", "--num-envs", "2", "--resume"],
                                  ["finetune", "--out", "o", "--frozen-iterations", "6",
                                   "--update-threads", "2"],
                                  ["bench", "gae", "--repeats", "2"],
                                  ["bench", "rollouts", "--envs", "1"],
                                  ["bringup", "--sim", "--episodes", "2", "--instruction",
                                   "pick up the red cube", "--checkpoint", "c", "--seed", "3",
                                   "--out", "o", "--sim-param", "time_limit_s:=5.0"]])
def test_subcommands_parse(argv):
    args, extra = build_parser().parse_known_args(argv)
    assert callable(args.func)
    assert not extra or args.passthrough is not None


@pytest.mark.parametrize("argv, message", [
    (["eval", "--ros", "--instructions", "wrong"], "in process only"),
    (["eval", "--ros", "--seed", "0"], "--seed >= 1"),
    (["eval", "--ros", "--noise", "fixed"], "in process only"),
])
def test_eval_over_ros_refuses_what_it_cannot_do(argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_eval_over_ros_passes_the_policy_options_to_policy_node():
    from diffusion_policy_ros.cli.evaluate import _policy_params

    args = build_parser().parse_args(["eval", "--ros", "--backend", "aotinductor",
                                      "--samples", "4", "--grasp-retry", "off"])
    assert _policy_params(args) == ["backend:=aotinductor", "precision:=fp32", "num_samples:=4",
                                    "grasp_retry.enabled:=false"]
    assert _policy_params(build_parser().parse_args(["eval", "--precision", "bf16"])) == [
        "backend:=torch", "precision:=bf16"]


def test_eval_takes_the_chunk_rules_from_a_rules_file_and_none_without_one():
    from diffusion_policy_ros.cli.evaluate import _policy_params, _rules
    from diffusion_policy_ros.config import CONFIG_DIR

    rules_file = str(CONFIG_DIR / "grasp_rules.yaml")
    rules = _rules(build_parser().parse_args(["eval", "--rules", rules_file]))
    assert rules.grasp_retry.enabled and rules.grasp_lift.enabled
    assert rules.grasp_lift.lift_m == 0.15
    one = _rules(build_parser().parse_args(["eval", "--rules", rules_file, "--grasp-lift",
                                            "off"]))
    assert one.grasp_retry.enabled and not one.grasp_lift.enabled
    none = _rules(build_parser().parse_args(["eval"]))
    assert not none.grasp_retry.enabled and not none.grasp_lift.enabled
    with pytest.raises(ValueError, match="empty_below_m is not set"):
        _rules(build_parser().parse_args(["eval", "--grasp-retry", "on"]))
    # over ROS: the same parameters for policy_node
    params = _policy_params(build_parser().parse_args(["eval", "--ros", "--rules", rules_file,
                                                       "--grasp-lift", "off"]))
    assert "grasp_retry.empty_below_m:=0.02" in params and "grasp_lift.lift_m:=0.15" in params
    assert params[-1] == "grasp_lift.enabled:=false"


def test_eval_over_ros_passes_the_camera_options_to_sim_node():
    from diffusion_policy_ros.cli.evaluate import _sim_params

    args = build_parser().parse_args(["eval", "--ros", "--depth-noise", "--resolution", "640",
                                      "360"])
    assert _sim_params(args) == ["depth_noise:=true", "resolution:=[640,360]"]
    assert _sim_params(build_parser().parse_args(["eval", "--ros"])) == []


def test_collect_recovery_without_a_checkpoint_is_a_clear_error(tmp_path, capsys):
    assert main(["collect", "--episodes", "1", "--out", str(tmp_path / "out"),
                 "--recover-from", str(tmp_path / "missing")]) == 2
    assert "missing" in capsys.readouterr().err


def test_unknown_option_is_an_error():
    with pytest.raises(SystemExit):
        main(["bench", "perception", "--bogus"])


def test_unknown_subcommand_exits_with_usage():
    with pytest.raises(SystemExit):
        build_parser().parse_args(["fly"])


@pytest.mark.parametrize("command", [["eval", "--episodes", "1"], ["export"],
                                     ["finetune", "--out", "run"]])
def test_a_corrupt_checkpoint_is_one_line_and_exit_2_in_every_command(command, tmp_path,
                                                                     capsys):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "metadata.json").write_text("{not json")
    flag = "--init" if command[0] == "finetune" else "--checkpoint"
    argv = [*command, flag, str(bad)]
    if command[0] == "finetune":
        argv[2] = str(tmp_path / "run")
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"dpr {command[0]}: ") and "not valid JSON" in err
    assert len(err.splitlines()) == 1


def test_finetune_stage_and_thread_options_reach_its_config(monkeypatch, tmp_path):
    from diffusion_policy_ros.learning import finetune as ft

    seen = {}

    def fake_finetune(init, config, out, resume=False):
        seen["config"] = config
        return tmp_path

    monkeypatch.setattr(ft, "finetune", fake_finetune)
    assert main(["finetune", "--out", str(tmp_path / "run"), "--frozen-iterations", "6",
                 "--update-threads", "2"]) == 0
    assert (seen["config"].frozen_iterations, seen["config"].update_threads) == (6, 2)


def _script_commands(script: Path) -> list[list[str]]:
    """The ``$dpr ...`` command lines of a shell script, continuation lines joined."""
    text = script.read_text().replace("\\\n", " ")
    return [shlex.split(line.split("$dpr", 1)[1]) for line in text.splitlines()
            if "$dpr " in line and not line.lstrip().startswith("#")]


def test_the_reproduction_script_s_commands_parse_and_name_committed_configs():
    """scripts/train_shipped.sh runs for hours: its commands must still be the CLI's."""
    commands = _script_commands(ROOT / "scripts" / "train_shipped.sh")
    assert {c[0] for c in commands} == {"collect", "train", "eval", "distill"}
    for argv in commands:
        build_parser().parse_args(argv)  # exits (SystemExit) on an unknown option
        for word in argv:
            if word.startswith("config/"):
                assert (ROOT / word).is_file(), word


def test_dpr_eval_offers_every_instruction_mode_the_evaluator_has():
    from diffusion_policy_ros.learning.evaluate import INSTRUCTION_MODES

    action = next(a for a in build_parser()._subparsers._group_actions[0].choices["eval"]
                  ._actions if a.dest == "instructions")
    assert tuple(action.choices) == INSTRUCTION_MODES
