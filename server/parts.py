"""One request over several connections (parallelism, `contracts.transfer`): the server's side.

Each part arrives on a connection and a thread of its own (`X-Transfer` names the request, `X-Part:
i/P` the part). Its thread reads the part's body and leaves it here; the thread of the last part to
arrive runs the request on the parts joined in order (the same handler as one connection's: limits,
the work slot, the stages) and publishes the reply, which every part's thread then answers its share
of (part i of the reply body, in the same near-equal slices; an error reply whole, on every part).

Bounds: the parts of one transfer together may hold at most the server's body limit (past it, every
part is answered 413); a part waits at most `timeout` seconds for the others (then 408, and the
transfer is dropped); a transfer cannot hold more threads than the server has, so P must stay below
`--threads` (each part keeps its thread while it waits), which the client's settings respect.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from contracts.transfer import PART_HEADER, join, part_header, split
from contracts.wire import body_bytes
from server.handler import Reply, error_reply


@dataclass
class Transfer:
    tid: str
    parts: list[bytes | None]
    held: int = 0  # bytes of the parts that arrived
    reply: Reply | None = None
    answered: int = 0  # parts whose share of the reply was taken
    started: float = field(default_factory=time.monotonic)

    def settle(self, reply: Reply) -> None:
        """The reply is known: the parts' bytes are no longer needed."""
        self.reply = reply
        self.parts = [b"" if p is not None else None for p in self.parts]


class Rendezvous:
    """The transfers whose parts are arriving, and their replies once run."""

    def __init__(self, max_body: int, timeout: float) -> None:
        self.max_body, self.timeout = max_body, timeout
        self._cond = threading.Condition()
        self._open: dict[str, Transfer] = {}

    def arrive(self, tid: str, index: int, parts: int, data: bytes) -> tuple[Transfer, bool] | Reply:
        """Leave part `index` of `parts`: the transfer, and whether this part completed it (its thread
        then runs the request and `publish`es the reply); or a refusal for this part alone."""
        with self._cond:
            self._prune()
            transfer = self._open.get(tid)
            if transfer is None:
                transfer = self._open[tid] = Transfer(tid, [None] * parts)
            if len(transfer.parts) != parts:
                return error_reply(
                    400, "bad part", f"transfer {tid} has {len(transfer.parts)} parts, not {parts}"
                )
            if transfer.parts[index] is not None:
                return error_reply(400, "bad part", f"part {index + 1} of transfer {tid} arrived twice")
            transfer.parts[index] = data
            transfer.held += len(data)
            if transfer.held > self.max_body and transfer.reply is None:
                transfer.settle(
                    error_reply(
                        413, "body too large", f"the parts of transfer {tid} exceed {self.max_body} bytes"
                    )
                )
                self._cond.notify_all()
            complete = all(p is not None for p in transfer.parts) and transfer.reply is None
            return transfer, complete

    def take(self, transfer: Transfer) -> bytes:
        """The completed transfer's body, its parts joined in order; the parts are let go at once (the
        body is the request's, within the one-request memory bound)."""
        with self._cond:
            body = join(transfer.parts)
            transfer.parts = [b""] * len(transfer.parts)
        return body

    def publish(self, transfer: Transfer, reply: Reply) -> None:
        with self._cond:
            transfer.settle(reply)
            self._cond.notify_all()

    def answer(self, transfer: Transfer, index: int) -> Reply:
        """Part `index`'s share of the reply, once there is one; 408 after `timeout` without."""
        with self._cond:
            done = self._cond.wait_for(lambda: transfer.reply is not None, timeout=self.timeout)
            if not done:
                self._open.pop(transfer.tid, None)
                return error_reply(
                    408,
                    "request timeout",
                    f"the other parts of transfer {transfer.tid} did not arrive in time",
                )
            reply = transfer.reply
            transfer.answered += 1
            if transfer.answered == len(transfer.parts):
                self._open.pop(transfer.tid, None)
        if reply.status != 200:
            return reply
        n = len(transfer.parts)
        body = bytes(split(body_bytes(reply.body), n)[index])
        return Reply(reply.status, body, {**reply.headers, PART_HEADER: part_header(index, n)})

    def _prune(self) -> None:
        """Forget transfers older than the timeout: their waiting parts have been answered 408, and a
        part that never came holds no thread."""
        now = time.monotonic()
        for tid, transfer in list(self._open.items()):
            if now - transfer.started > 2 * self.timeout:
                del self._open[tid]

    def open_transfers(self) -> int:
        with self._cond:
            return len(self._open)
