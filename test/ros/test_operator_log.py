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
