"""The ROS 2 user's path with the real `ros2` CLI on a colcon build: `ros2 topic pub`,
`ros2 run ... dpr`, `ros2 param` (skipped with the reason where the tools are missing)."""

import subprocess

import pytest
from rclpy.qos import DurabilityPolicy, QoSProfile
from std_msgs.msg import String

pytestmark = pytest.mark.ros

#: The README's instruction command (run by a shell, as a user types it).
README_INSTRUCTION = ("ros2 topic pub --once --keep-alive 2 /instruction std_msgs/msg/String "
                      "\"{data: 'pick up the red cube'}\"")


def test_the_readme_documents_this_instruction_command(readme_instruction):
    assert readme_instruction == README_INSTRUCTION
LATCHED = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL)


def _shell(command: str, env: dict, timeout_s: float = 60.0) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", command], env=env, capture_output=True, text=True,
                          timeout=timeout_s)


def test_readme_instruction_command_and_a_latched_instruction_reach_policy_node(
        ros, ros2_env, ros2_command, colcon_install):
    """`ros2 topic pub` (volatile) used to wait forever for policy_node's transient-local
    subscription; a late-joining policy_node must still get a latched instruction."""
    taken = []
    ros.node.create_subscription(String, "policy/instruction", lambda m: taken.append(m.data),
                                 LATCHED)
    latched_pub = ros.node.create_publisher(String, "instruction", LATCHED)
    latched_pub.publish(String(data="grab the green ball"))  # before policy_node exists
    params = colcon_install.share / "config/policy_node.yaml"
    policy = ros2_command(["ros2", "run", "diffusion_policy_ros", "policy_node", "--ros-args",
                           "--params-file", str(params)], ros2_env, "policy_node")
    ros.spin_until(lambda: taken == ["grab the green ball"], 90.0,
                   lambda: f"the latched instruction at policy_node, got {taken}:\n"
                           f"{policy.log()[-3000:]}")
    for attempt in range(3):
        result = _shell(README_INSTRUCTION, ros2_env)
        assert result.returncode == 0, result.stdout + result.stderr
        ros.spin_until(lambda n=attempt: taken.count("pick up the red cube") == n + 1, 10.0,
                       lambda n=attempt, r=result: f"README instruction #{n + 1} at "
                       f"policy_node: {taken}\nros2 topic pub: {r.stdout[-500:]}\n"
                       f"{policy.log()[-3000:]}")
    # A live message of a latched publisher reaches both subscriptions: taken once.
    latched_pub.publish(String(data="lift the blue block"))
    ros.spin_until(lambda: "lift the blue block" in taken, 10.0, "the live latched message")
    ros.spin_for(1.0)
    assert taken.count("lift the blue block") == 1, taken
    log = policy.log()
    assert log.count("instruction: 'lift the blue block'") == 1, log
    assert "incompatible QoS" not in log, log
    assert policy.interrupt(group=True) == []
    assert policy.proc.returncode == 0 and "Traceback" not in policy.log(), policy.log()


def test_dpr_runs_from_the_colcon_install(ros2_env, tmp_path):
    """`ros2 run diffusion_policy_ros dpr collect` failed: config/sim.yaml was looked for
    next to the installed Python package."""
    result = _shell("ros2 run diffusion_policy_ros dpr --help", ros2_env)
    assert result.returncode == 0 and "collect" in result.stdout, result.stdout + result.stderr
    out = tmp_path / "demos"
    result = _shell(f"ros2 run diffusion_policy_ros dpr collect --episodes 1 --seed 3 "
                    f"--out {out}", ros2_env, timeout_s=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "expert succeeded 1" in result.stdout, result.stdout
    assert (out / "episode_000003" / "metadata.yaml").is_file()
