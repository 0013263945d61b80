"""The gates that thin the tracker's side outputs (gripper command, reference)."""

import pytest

from diffusion_policy_ros.control.publish_gates import HeldCommandGate, RateGate


def test_a_held_command_goes_out_on_change_and_as_a_keepalive():
    gate = HeldCommandGate(keepalive_s=0.1)
    ticks = [k * 0.002 for k in range(200)]  # 0.4 s at 500 Hz, the opening unchanged
    sent = [t for t in ticks if gate.due(0.085, t)]
    assert sent == pytest.approx([0.0, 0.1, 0.2, 0.3])
    assert gate.due(0.084, 0.401)  # a change goes out at once
    assert gate.due(0.083, 0.402)  # ... every tick while the gripper closes
    assert not gate.due(0.083, 0.403)
    assert gate.due(0.083, 0.1)  # the clock went back (a bag restarted): at once


def test_keepalive_zero_sends_every_time():
    gate = HeldCommandGate(keepalive_s=0.0)
    assert all(gate.due(0.05, k * 0.002) for k in range(10))


def test_the_rate_gate_holds_its_rate_on_a_grid_however_ticks_fall():
    gate = RateGate(rate_hz=50.0)
    ticks = [k * 0.002 + (0.0007 if k % 3 else 0.0) for k in range(500)]  # 1 s, jittered
    sent = [t for t in ticks if gate.due(t)]
    assert len(sent) == 50
    assert all(0.018 < b - a < 0.022 for a, b in zip(sent, sent[1:], strict=False))
    assert gate.due(0.5)  # the clock went back: afresh
    assert not gate.due(0.51)
    gate.restart()
    assert gate.due(0.51)


def test_the_rate_gate_takes_a_time_on_its_grid_up_to_rounding():
    gate = RateGate(rate_hz=500.0)  # sim_node's joint_states: every 2 ms physics step
    clock, sent = 0.0, 0
    for _ in range(1000):
        clock += 0.002  # a sum of float steps, as MuJoCo's clock
        sent += gate.due(clock)
    assert sent == 1000


@pytest.mark.parametrize("make", [lambda: HeldCommandGate(-1.0), lambda: RateGate(0.0)])
def test_refuses_settings_that_cannot_work(make):
    with pytest.raises(ValueError):
        make()
