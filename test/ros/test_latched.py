"""One subscription pair per latched topic: identities of deliveries (no ROS graph needed)."""

from diffusion_policy_ros.ros.latched import FirstDelivery


def _info(gid: bytes, seq: int | None, stamp: int = 0) -> dict:
    return {"publisher_gid": {"implementation_identifier": "rmw", "data": gid},
            "publication_sequence_number": seq, "source_timestamp": stamp}


def test_the_second_copy_of_a_message_is_dropped_and_repeats_of_the_words_are_not():
    seen = FirstDelivery()
    assert seen.first(_info(b"a", 1)) and not seen.first(_info(b"a", 1))
    assert seen.first(_info(b"a", 2))  # the same publisher again: a new message
    assert seen.first(_info(b"b", 1))  # another publisher (each ros2 topic pub starts at 1)


def test_without_gid_or_sequence_the_source_timestamp_identifies_and_nothing_means_new():
    seen = FirstDelivery()
    no_gid = {"publisher_gid": None, "publication_sequence_number": None, "source_timestamp": 7}
    assert seen.first(no_gid) and not seen.first(no_gid)
    nothing = {"source_timestamp": 0}
    assert seen.first(nothing) and seen.first(nothing)


def test_only_the_last_identities_are_kept():
    seen = FirstDelivery(keep=2)
    for seq in (1, 2, 3):
        assert seen.first(_info(b"a", seq))
    assert seen.first(_info(b"a", 1)) and not seen.first(_info(b"a", 3))
