"""Serving the application with gunicorn (one worker of bounded threads), started from Python rather
than its CLI.

`ServerConfig.gunicorn_options()` is the whole plan, so `python -m server --dry-run` can print it and
tests can check it without starting anything. The worker (`server.gunicorn_worker`) bounds how long a client
may take to send; the application (`contracts.limits`) bounds what one request may cost.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path

from gunicorn.app.base import BaseApplication

from server.app import create_app
from server.timing import load_pace


@dataclass(frozen=True)
class ServerConfig:
    bind: str = "127.0.0.1"
    port: int = 8080
    workers: int = 1
    # per worker: slow clients each hold one while they send; requests compute one at a time
    threads: int = 8
    timeout: float = 900.0  # a 1200x1200 JSON matrix over 10 Mbit/s takes tens of seconds to arrive
    read_timeout: float = 20.0  # a client silent this long while sending (or not reading) is dropped
    max_body_mb: float = 256.0
    log_level: str = "info"
    access_log: bool = True
    work_slots: int = 1  # requests that decode, compute and encode at once (the rest wait: `queue`)
    pace: str | None = None  # a server device's profile (JSON) whose times every stage lasts
    datasets: str | None = None  # the directory of the datasets it serves (`server.datasets`)

    def gunicorn_options(self) -> dict:
        host = f"[{self.bind}]" if ":" in self.bind else self.bind
        return {
            "bind": [f"{host}:{self.port}"],
            "workers": self.workers,
            "worker_class": "server.gunicorn_worker.BoundedThreadWorker",
            "threads": self.threads,
            # an idle connection (nothing sent yet) waits on the worker's poller this long
            "keepalive": math.ceil(self.read_timeout),
            "timeout": math.ceil(self.timeout),
            "loglevel": self.log_level,
            "errorlog": "-",
            "accesslog": "-" if self.access_log else None,
            "proc_name": "offload-server",
            # gunicorn >= 25.1 otherwise opens a control socket in a fixed per-user place, and a
            # second server on the same host (tests, two labs) would fight over it.
            "control_socket_disable": True,
        }

    def as_dict(self) -> dict:
        return asdict(self)


class OffloadServer(BaseApplication):
    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        super().__init__()

    def load_config(self) -> None:
        for key, value in self.config.gunicorn_options().items():
            if key in self.cfg.settings:  # options an older gunicorn does not have are skipped
                self.cfg.set(key, value)

    def load(self):
        c = self.config
        datasets = Path(c.datasets) if c.datasets else None
        return create_app(c.max_body_mb, c.read_timeout, c.timeout, c.work_slots, load_pace(c.pace), datasets)


def serve(config: ServerConfig) -> None:
    """Run until SIGTERM/SIGINT (gunicorn's arbiter handles both and stops its workers)."""
    OffloadServer(config).run()
