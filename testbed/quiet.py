"""Testbeds on one machine share it for trials; a link validation needs the machine to itself.

The embedded testbeds of a sweep (replicas) each forward their traffic through a userspace Open
vSwitch, which is CPU work of this machine. A trial beside another testbed's transfer is fine (its
timed CPU stages hold the CPU lock; its transfer is wall-clock on its own link), but an iperf3
validation measures how much goodput the link gives, and beside the other testbeds' transfers it
measures their load instead. Measured on the 2-core VM with four testbeds, in the paper's grid:
while the testbeds validated their rates at about the same time, before their trials, 11 of 77
attempts fell short and every rate validated within its retries; at the grid's end, where each small
round moves testbeds between rates while the others transfer, 17 of 35 attempts fell short (by up to
51% at 100 Mbit/s), four rates were given up after three attempts each, and 122 of the session's
first 180 trials were failed rows "link validation failed".

The local baseline needs the machine to itself as much: in scaled mode its time is the host's CPU
time for the kernel times the device's slowdown, hundreds-fold for the paper's client (mul 800: 30
ms of this host's CPU for the device's 11.75 s), so the few milliseconds another testbed's traffic
adds to the kernel become seconds. Measured in the paper's grid with four testbeds, the local
baseline beside the others' transfers: mul 800 10.6 to 30.1 s in 9 trials (mean 16.3 s), mul 1000
24.8 to 55.3 s (the device's 24.6 s); on one quiet testbed the same baseline was 11.0 to 12.1 s in
three runs of 5 trials each.

`Quiet` is a readers-writer lock over the sweep's threads: remote trials take it `shared`, a
validation and a unit of local trials `alone`, and one waiting to be alone stops new trials from
starting (it waits at most for the trials in flight, never behind a stream of new ones).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class Quiet:
    """Shared by trials, exclusive for validations; writers first."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writer = False
        self._waiting = 0  # validations waiting: new trials wait behind them

    @contextmanager
    def shared(self) -> Iterator[None]:
        with self._cond:
            self._cond.wait_for(lambda: not self._writer and not self._waiting)
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                self._cond.notify_all()

    @contextmanager
    def alone(self) -> Iterator[None]:
        with self._cond:
            self._waiting += 1
            try:
                self._cond.wait_for(lambda: not self._writer and not self._readers)
            finally:
                self._waiting -= 1
            self._writer = True
        try:
            yield
        finally:
            with self._cond:
                self._writer = False
                self._cond.notify_all()


class NoQuiet:
    """A testbed that shares no machine with another (one testbed, or one over SSH)."""

    @contextmanager
    def shared(self) -> Iterator[None]:
        yield

    @contextmanager
    def alone(self) -> Iterator[None]:
        yield
