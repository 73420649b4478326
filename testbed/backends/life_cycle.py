"""One use of a testbed, left as it was found: the life cycle the sweep, the task stream and the
benchmarks share.

A testbed that is down is brought up for the use and taken down after it (unless kept up, then it
is left shaped as its inventory says); one that was up is used as it is and left up, with the link
that was in force when the use began. The end runs also after Ctrl-C, SIGTERM or an error; when a
failure is already under way, a failing end is logged and the first failure stays the one reported.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from contracts.errors import UserError
from contracts.profiles import LinkSpec

log = logging.getLogger("testbed.sweep")


class Usable(Protocol):
    """What a use needs of its lab (`testbed.backends.lab.Lab`, which opens it: `Lab.use`)."""

    inv: Any

    def is_up(self) -> bool: ...
    def up(self, start_server: bool = True) -> bool: ...
    def down(self) -> list[str]: ...
    def link_in_force(self) -> LinkSpec: ...
    def shape(self, link: LinkSpec, dry_run: bool = False) -> list[dict]: ...


class LabUse:
    """`open` brings the lab up if it is down; `close` takes it down again or restores its link."""

    def __init__(self, lab: Usable, keep_up: bool = False, start_server: bool = True) -> None:
        self.lab, self.keep_up, self.start_server = lab, keep_up, start_server
        self.brought_up = False
        self.was_up = False
        self.before: LinkSpec | None = None  # the link in force when a testbed that was up was found
        self.opened = False

    def open(self) -> LabUse:
        if self.lab.is_up():
            self.before = self.lab.link_in_force()
        self.brought_up = self.lab.up(self.start_server)  # also refuses a testbed up otherwise
        self.was_up = not self.brought_up
        self.opened = True
        return self

    def close(self, failing: bool = False) -> None:
        """Leave the testbed as it was found. `failing`: another error is under way, and stays the one
        reported (this end's own failure is logged)."""
        if not self.opened:
            return
        self.opened = False
        try:
            if self.brought_up and not self.keep_up:
                self.lab.down()
            else:
                self.lab.shape(self.before or self.lab.inv.link)
        except UserError as exc:
            if not failing:
                raise
            log.warning("leaving testbed %s as it was: %s", self.lab.inv.prefix, exc)

    def __enter__(self) -> LabUse:
        return self.open()

    def __exit__(self, kind, exc, tb) -> None:
        self.close(failing=exc is not None)
