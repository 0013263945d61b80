"""InstructionInbox: a length bound and a rate of new tasks, whatever the input rate."""

import threading

from diffusion_policy_ros.policy.language import INSTRUCTION_BURST, InstructionInbox


def test_a_too_long_instruction_is_refused_whole_and_the_pending_one_stays():
    inbox = InstructionInbox(max_chars=16, min_interval_s=0.5)
    assert inbox.offer("  pick   up the cube ") == "too_long"  # counted before normalising
    assert inbox.offer("lift  the cube") == ""
    assert inbox.offer("x" * 17) == "too_long"
    assert inbox.take(0.0) == "lift the cube"
    assert inbox.take(0.0) is None and not inbox.ready(0.0)
    assert dict(inbox.counts) == {"received": 3, "taken": 1, "refused_too_long": 2,
                                  "coalesced": 0}


def test_a_flood_is_coalesced_to_the_newest_words_at_a_bounded_rate():
    inbox = InstructionInbox(max_chars=256, min_interval_s=0.5)
    taken = []
    words = ("pick up the red cube", "grab the blue cube")
    for k in range(900):  # 300 a second for 3 s, looked at 60 times a second
        now = k / 300
        inbox.offer(words[k % 2])
        if k % 5 == 0:
            text = inbox.take(now)
            if text is not None:
                taken.append((now, text))
                assert text == words[k % 2]  # the newest words
    # The burst at once, then one task per interval.
    assert len(taken) == INSTRUCTION_BURST + 5, taken
    assert {text for _, text in taken} == set(words)
    assert all(t2 - t1 >= 0.5 - 1e-9 for (t1, _), (t2, _) in
               zip(taken[INSTRUCTION_BURST:], taken[INSTRUCTION_BURST + 1:], strict=False))
    counts = inbox.counts
    assert counts["received"] == 900 and counts["taken"] == len(taken)
    assert counts["coalesced"] + counts["taken"] + (1 if inbox.ready(100.0) else 0) == 900
    # What was pending at the end is taken once the interval has passed: never lost.
    assert inbox.take(100.0) == words[899 % 2]


def test_offers_from_another_thread_are_all_counted():
    inbox = InstructionInbox(max_chars=8, min_interval_s=0.0)
    threads = [threading.Thread(target=lambda: [inbox.offer("red cube") for _ in range(1000)])
               for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert inbox.counts["received"] == 4000
    assert inbox.take(0.0) == "red cube"
    assert inbox.counts["coalesced"] == 3999
