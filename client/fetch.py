"""A dataset fetch (the `fetch` op, `contracts.datasets`): the files of one of the energy study's
datasets from the server's read-only route, with the transfer settings as its knobs.

- concurrency C: C channels, each taking the next file when its last is done;
- parallelism P: each file in min(P, bytes) contiguous Range requests at once (the parts of
  `contracts.transfer.bounds`, as an offload request's), one connection each: a channel keeps P
  connections (HTTP keep-alive), opened within the trial (the connection policy per-trial);
- I/O size B: each response read in reads of B bytes (None: 64 KiB), the bytes counted and dropped.

Time runs from before the first connection until the last byte of the last file. Every response must
be the range asked for (206, or 200 for a whole file) with exactly its bytes, else the fetch fails.
"""

from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from urllib.parse import urlsplit

import requests
import urllib3

from contracts.datasets import ROUTE, FetchPlan, Part, fetch_plan

DEFAULT_READ = 64 * 1024


@dataclass(frozen=True)
class Fetched:
    seconds: float
    bytes_down: int  # the files' bytes received (bodies)
    bytes_up: int  # the requests' bytes sent (request lines and headers)
    requests: int


class FetchError(RuntimeError):
    """A response that is not the bytes asked for."""


def request_bytes(resp: requests.Response) -> int:
    """The bytes of the request as sent: request line, headers (Host included) and the blank line."""
    req = resp.request
    path = urlsplit(req.url)
    line = f"{req.method} {path.path}{'?' + path.query if path.query else ''} HTTP/1.1\r\n"
    headers = {"Host": path.netloc, **req.headers}
    return len(line) + sum(len(k) + len(str(v)) + 4 for k, v in headers.items()) + 2


def get_part(session: requests.Session, url: str, part: Part, size: int, io_bytes: int, timeout: float):
    """One Range request (or the whole file when it is one part) of a file of `size` bytes: (body
    bytes, request bytes). The server's file must be of that size (the seed's)."""
    whole = part.start == 0 and part.end == size
    headers = {} if whole else {"Range": part.header()}
    resp = session.get(f"{url}/{part.file}", headers=headers, stream=True, timeout=timeout)
    want = 200 if whole else 206
    if resp.status_code != want:
        detail = resp.content[:300].decode(errors="replace")
        raise FetchError(f"{part.file} {headers or 'whole'}: status {resp.status_code}: {detail}")
    served = resp.headers.get("Content-Range", "").rpartition("/")[2] if not whole else None
    served = served or resp.headers.get("Content-Length")
    if served != str(size):
        resp.close()
        raise FetchError(f"{part.file} is {served} bytes on the server, {size} from this seed")
    got = 0
    while chunk := resp.raw.read(io_bytes, decode_content=False):
        got += len(chunk)
    if got != part.end - part.start:
        raise FetchError(f"{part.file}: {got} bytes for a range of {part.end - part.start}")
    return got, request_bytes(resp)


def run_plan(base_url: str, plan: FetchPlan, io_bytes: int | None, timeout: float) -> Fetched:
    """Fetch every file of the plan: its channels at once, each file's parts at once."""
    url = f"{base_url.rstrip('/')}{ROUTE}/{plan.dataset}"
    io_bytes = io_bytes or DEFAULT_READ
    files: queue.SimpleQueue = queue.SimpleQueue()
    for parts in plan.files:
        files.put(parts)
    counts = {"down": 0, "up": 0, "requests": 0}
    lock = threading.Lock()
    errors: list[BaseException] = []
    streams = max(len(parts) for parts in plan.files)

    def channel() -> None:
        sessions = [requests.Session() for _ in range(streams)]
        pool = ThreadPoolExecutor(streams) if streams > 1 else None
        try:
            while not errors:
                try:
                    parts = files.get_nowait()
                except queue.Empty:
                    return
                size = parts[-1].end
                args = [(sessions[i], url, p, size, io_bytes, timeout) for i, p in enumerate(parts)]
                if pool is None:
                    results = [get_part(*args[0])]
                else:
                    results = list(pool.map(lambda a: get_part(*a), args))
                with lock:
                    counts["down"] += sum(r[0] for r in results)
                    counts["up"] += sum(r[1] for r in results)
                    counts["requests"] += len(results)
        except (requests.RequestException, urllib3.exceptions.HTTPError, FetchError) as exc:
            errors.append(exc)
        finally:
            if pool is not None:
                pool.shutdown(wait=True)
            for s in sessions:
                s.close()

    start = time.perf_counter()
    threads = [threading.Thread(target=channel, daemon=True) for _ in range(plan.channels)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout + 30)
    seconds = time.perf_counter() - start
    if errors:
        raise errors[0]
    if any(t.is_alive() for t in threads):
        raise TimeoutError(f"the fetch of {plan.dataset} did not end within {timeout:g} s")
    if counts["down"] != plan.total:
        raise FetchError(f"{counts['down']} bytes of {plan.dataset}'s {plan.total}")
    return Fetched(seconds, counts["down"], counts["up"], counts["requests"])


def fetch_dataset(
    base_url: str,
    dataset: str,
    seed: int,
    concurrency: int | None,
    parallelism: int | None,
    io_kb: int | None,
    timeout: float,
) -> Fetched:
    """Fetch the whole dataset (its files and sizes from the seed) with these transfer settings."""
    plan = fetch_plan(dataset, seed, concurrency, parallelism)
    return run_plan(base_url, plan, io_kb * 1024 if io_kb else None, timeout)
