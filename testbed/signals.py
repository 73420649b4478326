"""Signal handling shared by the sweep and the benchmarks."""

from __future__ import annotations

import os
import signal
from contextlib import contextmanager


@contextmanager
def sigterm_as_interrupt():
    """A `kill` (SIGTERM) ends the sweep or benchmark as cleanly as Ctrl-C does: a KeyboardInterrupt."""

    owner = os.getpid()

    def handler(signum, frame):
        if os.getpid() != owner:  # a forked helper (pyroute2's netns workers): just end, as by default
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
