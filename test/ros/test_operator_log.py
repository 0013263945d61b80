"""OperatorLog: what policy_node tells its operator, bounded (no ROS: a list logger)."""

from diffusion_policy_ros.acting.agent import OBSERVATION_MISMATCH
from diffusion_policy_ros.acting.observation_history import STALE_OBSERVATION, Refusal
from diffusion_policy_ros.ros.operator_log import OperatorLog


class ListLogger:
    def __init__(self):
        self.lines: list[tuple[str, str]] = []

    def __getattr__(self, severity):
        return lambda text: self.lines.append((severity, text))


def test_a_mismatched_graph_is_one_error_per_distinct_mismatch():
    logger = ListLogger()
    log = OperatorLog(logger, "/instruction")
    points = Refusal(OBSERVATION_MISMATCH, "observation/points has 512 points ...")
    image = Refusal(OBSERVATION_MISMATCH, "observation/image is 96x96 px ...")
    for _ in range(50):
        log.refused(points)
    log.refused(image)
    log.refused(points)
    assert logger.lines == [("error", f"not acting, holding: {points.detail}"),
                            ("error", f"not acting, holding: {image.detail}")]
    assert log.values()["refused_observation_mismatch"] == "52"
    assert log.refusal == points


def test_other_refusals_warn_at_most_once_per_period():
    logger = ListLogger()
    log = OperatorLog(logger, "/instruction", period_s=60.0)
    for _ in range(20):
        log.refused(Refusal(STALE_OBSERVATION, "the newest frame is 0.8 s old"))
    assert [s for s, _ in logger.lines] == ["warning"]
    assert log.values()["refused_stale_observation"] == "20"


def test_the_node_status_names_the_first_thing_that_keeps_it_from_acting():
    from diagnostic_msgs.msg import DiagnosticStatus

    from diffusion_policy_ros.ros.operator_log import node_status

    mismatch = Refusal(OBSERVATION_MISMATCH, "observation/points has 512 points ...")
    stale = Refusal(STALE_OBSERVATION, "0.8 s old")
    assert node_status("unconfigured", "no checkpoint", False, None, 0.0, 10.0) == (
        DiagnosticStatus.ERROR, "no checkpoint")
    assert node_status("inactive", "", False, None, 0.0, 10.0)[1] == "inactive: not acting"
    assert node_status("active", "", True, stale, 0.0, 10.0)[1] == "stopped by ~/stop"
    assert node_status("active", "", False, mismatch, 0.0, 10.0)[0] == DiagnosticStatus.ERROR
    assert node_status("active", "", False, stale, 0.0, 10.0)[0] == DiagnosticStatus.WARN
    assert node_status("active", "", False, None, 7.0, 10.0)[0] == DiagnosticStatus.WARN
    assert node_status("active", "", False, None, 9.5, 10.0) == (DiagnosticStatus.OK, "acting")
