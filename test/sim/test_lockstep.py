"""LockstepHandshake: the sim's side of the lockstep, by wall times alone."""

import numpy as np
import pytest

from diffusion_policy_ros.sim.lockstep import CommandVerdict, LockstepHandshake, TurnVerdict

EFFORT_A = np.array([1.0, 0, 0, 0, 0, 0])
EFFORT_B = np.array([2.0, 0, 0, 0, 0, 0])


def handshake(**kwargs) -> LockstepHandshake:
    return LockstepHandshake(**{"timeout_s": 0.5, "resend_s": 0.02, **kwargs})


def test_an_answer_steps_on_and_its_wait_is_measured():
    lock = handshake()
    lock.asked(10.0)
    assert lock.awaiting
    assert lock.on_turn(10.005) is TurnVerdict.WAIT
    assert lock.on_command(EFFORT_A, 10.004) is CommandVerdict.ANSWER
    assert not lock.awaiting
    assert lock.wait_ms.percentile(50) == pytest.approx(4.0)
    # Between states a command answers nothing awaited.
    assert lock.on_command(EFFORT_B, 10.006) is CommandVerdict.UNASKED
    assert (lock.resends, lock.duplicates, lock.timeouts) == (0, 0, 0)


def test_asks_again_on_the_second_turn_past_resend_s_then_every_resend_s():
    lock = handshake()
    lock.asked(0.0)
    assert lock.on_turn(0.019) is TurnVerdict.WAIT
    # The first turn past the interval lets an already-queued answer be taken ...
    assert lock.on_turn(0.021) is TurnVerdict.WAIT
    # ... the next one asks again, and the interval restarts from there.
    assert lock.on_turn(0.022) is TurnVerdict.ASK_AGAIN
    assert lock.on_turn(0.030) is TurnVerdict.WAIT
    assert lock.on_turn(0.043) is TurnVerdict.WAIT
    assert lock.on_turn(0.044) is TurnVerdict.ASK_AGAIN
    assert lock.resends == 2 and lock.awaiting


def test_twin_answers_to_the_copies_are_dropped_and_the_next_state_answered():
    lock = handshake()
    lock.asked(0.0)
    lock.on_turn(0.03)
    assert lock.on_turn(0.031) is TurnVerdict.ASK_AGAIN
    # The copy's answer (or the late first one) arrives: it answers the state ...
    assert lock.on_command(EFFORT_A, 0.032) is CommandVerdict.ANSWER
    lock.asked(0.033)  # ... the sim steps on and publishes the next state
    # ... and the other answer to the same state, the same effort, is a duplicate.
    assert lock.on_command(EFFORT_A, 0.034) is CommandVerdict.DUPLICATE
    assert lock.awaiting and lock.duplicates == 1
    assert lock.on_command(EFFORT_B, 0.035) is CommandVerdict.ANSWER
    # No copies of this one went out: the same effort again is a real answer.
    lock.asked(0.036)
    assert lock.on_command(EFFORT_B, 0.037) is CommandVerdict.ANSWER
    assert lock.duplicates == 1


def test_a_different_effort_is_the_next_answer_even_while_a_twin_is_owed():
    lock = handshake()
    lock.asked(0.0)
    lock.on_turn(0.03)
    lock.on_turn(0.031)  # asked again: one twin owed after the answer
    assert lock.on_command(EFFORT_A, 0.032) is CommandVerdict.ANSWER
    lock.asked(0.033)
    assert lock.on_command(EFFORT_B, 0.034) is CommandVerdict.ANSWER
    lock.asked(0.035)
    # The owed twin was forgotten: an equal effort now answers the new state.
    assert lock.on_command(EFFORT_B, 0.036) is CommandVerdict.ANSWER
    assert lock.duplicates == 0


def test_times_out_on_the_second_turn_past_timeout_s_and_resumes_on_a_command():
    lock = handshake(resend_s=0.0)
    lock.asked(0.0)
    assert lock.on_turn(0.4) is TurnVerdict.WAIT
    assert lock.on_turn(0.51) is TurnVerdict.WAIT
    assert lock.on_turn(0.52) is TurnVerdict.TIMED_OUT
    assert lock.free_running and not lock.awaiting and lock.timeouts == 1
    assert lock.resends == 0  # resend_s 0 never asks again
    assert lock.on_command(EFFORT_A, 0.6) is CommandVerdict.RESUMED
    assert not lock.free_running and not lock.awaiting


def test_a_new_state_restarts_the_grace_turn():
    lock = handshake(resend_s=0.0)
    lock.asked(0.0)
    assert lock.on_turn(0.51) is TurnVerdict.WAIT  # past the timeout: one turn of grace
    lock.asked(0.52)  # (answered meanwhile; the next state is out)
    assert lock.on_turn(1.03) is TurnVerdict.WAIT  # a fresh grace turn, not a timeout
    assert lock.on_turn(1.04) is TurnVerdict.TIMED_OUT


def test_cancel_forgets_the_awaited_state_and_owed_twins():
    lock = handshake()
    lock.asked(0.0)
    lock.on_turn(0.03)
    lock.on_turn(0.031)
    lock.on_command(EFFORT_A, 0.032)
    lock.asked(0.033)
    lock.cancel()  # a reset
    assert not lock.awaiting
    lock.asked(0.04)
    assert lock.on_command(EFFORT_A, 0.041) is CommandVerdict.ANSWER


def test_on_turn_needs_an_awaited_state():
    with pytest.raises(RuntimeError):
        handshake().on_turn(0.0)


@pytest.mark.parametrize("timeout_s, resend_s", [(0.0, 0.0), (0.5, 0.5), (0.5, -0.1)])
def test_refuses_settings_that_cannot_work(timeout_s, resend_s):
    with pytest.raises(ValueError):
        LockstepHandshake(timeout_s, resend_s)
