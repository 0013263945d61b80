"""Error kinds every ``dpr`` command reports the same way (``diffusion_policy_ros/cli``)."""

from __future__ import annotations


class InputError(Exception):
    """Input a user can fix: a checkpoint, a bag, a device, a path. The command line
    prints the message as one line and exits 2."""


class RunStopped(Exception):
    """A long run stopped before its end for the reason in the message, with what it had
    saved intact. The command line prints the message as one line and exits 3."""
