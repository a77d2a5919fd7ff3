"""What the Prefect API's users and the temporary server share: the one-line error when there is no API, and the
death signal that ties a child process's life to its parent's (so no server outlives its command)."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable

from tasks.core.errors import UserError

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


class PrefectUnavailable(UserError):
    """No Prefect API to talk to; the message is one line meant for the user."""


def death_signal(sig: int = signal.SIGTERM) -> Callable[[], None] | None:
    """A `preexec_fn` that makes the child receive `sig` when its parent (thread) dies; None off Linux.

    libc and `prctl` are resolved here, in the parent, so the forked child only makes the call.
    """
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    parent = os.getpid()

    def preexec() -> None:
        if prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0) != 0:
            os._exit(127)
        if os.getppid() != parent:  # the parent died between fork() and prctl(): nobody will signal us
            os._exit(128 + sig)

    return preexec
