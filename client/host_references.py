"""The reference runs of every trial worker on this host, shared: one view of the host's speed.

In scaled mode a worker's slowdowns follow this host's recent speed through the CPU times of its
trials (`client.scaler`). Replicas on one host each have a worker, and each worker used to follow its
own runs only: a window of a few runs per kind of work, the calibration's mean first, so one slow run
set a replica's slowdowns for the next minutes. Measured in issue 25's check (four testbeds on the
2-core VM, mul 800 JSON at 100 Mbit/s): the same host CPU time for the server's decode (0.59-0.61 s)
scaled by 1.44 on one replica and 1.60-1.63 on another, the client's decode by 5.22-5.32 against
5.50-5.57, a replica effect in 3 of 24 tests made by the emulation, not by the replicas. The host's
speed is one quantity for every worker on it, so every worker follows every worker's runs: each
appends its runs to one file beside the host-wide CPU lock and reads the others' since its last look.

The file is only touched with the CPU lock held (the runs are taken under it anyway), so a reader
never meets half a line. Lines are JSON (`[whose, key, cpu_s]`: the client's or the server's run
of a kind of work); one that does not parse (a writer killed mid-line, an older sweep's line) is
skipped. The server's runs are the server host's: on one machine (embedded testbeds) every replica's
server is on it, so they are one host's speed too. A worker starts reading at the file's end: runs of an earlier
sweep are not this one's host speed. `testbed down` of the last testbed removes the file with the lock.
"""

from __future__ import annotations

import json
import os

from client.scaler import CLIENT, SERVER, Run


class HostReferences:
    """This host's reference runs, every worker's. Without a path (one testbed on the host) a
    worker's runs are the host's."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self._offset: int | None = None  # where this worker's next read starts

    def exchange(self, mine: list[Run]) -> list[Run]:
        """Publish this worker's runs and return every run on the host since the last exchange, its
        own among them in the order written. Call with the CPU lock held."""
        if self.path is None:
            return list(mine)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        with os.fdopen(fd, "r+b") as f:
            size = f.seek(0, os.SEEK_END)
            if self._offset is None:
                self._offset = size
            elif self._offset > size:  # the file was removed and made again: all of it is new
                self._offset = 0
            if mine:
                f.write(b"".join(json.dumps(list(run)).encode() + b"\n" for run in mine))
                f.flush()
            f.seek(self._offset)
            data = f.read()
        end = data.rfind(b"\n") + 1  # a line still being written (none under the lock) waits
        self._offset += end
        return [run for line in data[:end].splitlines() if (run := _parse(line)) is not None]


def _parse(line: bytes) -> Run | None:
    try:
        whose, k, cpu_s = json.loads(line)
    except (ValueError, TypeError):
        return None
    return (
        (whose, str(k), float(cpu_s))
        if whose in (CLIENT, SERVER) and isinstance(cpu_s, (int, float))
        else None
    )
