"""The client's side of the transfer settings (`contracts.transfer`): its writes of the I/O size, and
one request over P connections.

Writes: the body is handed to urllib3 as buffers of the I/O size (`contracts.wire.Buffers`: a known
length, so Content-Length is set and the wire bytes are the same), which it passes to the socket one
`sendall` each.

Parallelism: P threads, each with a session (a connection) of its own, send part i of the body with
`X-Transfer` and `X-Part: i/P`; the server answers each with its share of the reply; the parts' bodies
are joined in order. The request's time runs from before the first part is sent until the last
part's answer has arrived.
"""

from __future__ import annotations

import secrets
import threading
from dataclasses import dataclass

import requests
import urllib3

from contracts.transfer import PART_HEADER, TRANSFER_HEADER, part_header, pieces, split
from contracts.wire import Buffers


def written(view: memoryview, io_bytes: int | None) -> Buffers:
    """A body as the client writes it: in pieces of `io_bytes` (None: as one buffer)."""
    return Buffers(list(pieces(view, io_bytes)) if io_bytes else [view])


@dataclass
class PartAnswer:
    status: int
    headers: dict
    content: bytes


def post_parts(
    sessions: list[requests.Session],
    url: str,
    view: memoryview,
    headers: dict[str, str],
    io_bytes: int | None,
    timeout: float,
) -> list[PartAnswer]:
    """POST the body in len(sessions) parts at once, one per session; their answers in part order.
    A transport error on any part is raised (the others' are not waited for beyond `timeout`)."""
    parts = len(sessions)
    tid = secrets.token_hex(8)
    answers: list[PartAnswer | None] = [None] * parts
    errors: list[BaseException] = []

    def send(i: int, part: memoryview) -> None:
        try:
            resp = sessions[i].post(
                url,
                data=written(part, io_bytes),
                headers={**headers, TRANSFER_HEADER: tid, PART_HEADER: part_header(i, parts)},
                timeout=timeout,
                stream=True,
            )
            content = resp.raw.read(decode_content=True)
            answers[i] = PartAnswer(resp.status_code, resp.headers, content)
        except (requests.RequestException, urllib3.exceptions.HTTPError) as exc:
            errors.append(exc)

    threads = [
        threading.Thread(target=send, args=(i, p), daemon=True) for i, p in enumerate(split(view, parts))
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout + 30)
    if errors:
        raise errors[0]
    if any(a is None for a in answers):
        raise requests.Timeout(f"a part of {parts} got no answer within {timeout:g} s")
    return answers
