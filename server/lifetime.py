"""How a long-lived transport server next to the HTTP server lives: until SIGTERM or SIGINT, or until
the process that started it (the HTTP server's master, `python -m server`) is gone, so that stopping
the offload server's process group, or its master dying, leaves none of them behind."""

from __future__ import annotations

import argparse
import os
import signal
import threading


def until_stopped(parent: int | None, poll_s: float = 1.0) -> None:
    """Return on SIGTERM or SIGINT, or once `parent` is no longer this process's parent."""
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    while not done.wait(poll_s):
        if parent is not None and os.getppid() != parent:
            return


def transport_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """The flags every transport server next to the HTTP server takes (`server.languages`: the same
    for each language's): `--bind`, `--port`, `--max-body-mb`, `--parent`."""
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("--bind", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--max-body-mb", type=float, default=256.0)
    p.add_argument("--parent", type=int, help="stop when this process is no longer the parent")
    return p
