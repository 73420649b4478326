"""The offload server's processes on the server host, as a testbed starts, checks and restarts them.

The HTTP server (`python -m server`, on the wsgi or cgi stack), its gRPC children (one per language,
`contracts.stages.GRPC_SERVERS`) and its tagless children (`contracts.stages.TAGLESS_SERVERS`), each
on a port of the inventory's; every one is checked from the client host, so an answer also proves
the path through the switch. A mixin of `testbed.backends.lab.Lab`, which holds the inventory, the
hosts and the settings these read (`grpc_servers`, `server_stack`, `work_slots`, `pace`, ...).
"""

from __future__ import annotations

import json

from contracts import agent_api as api
from contracts.errors import UserError
from contracts.stages import GRPC_SERVERS, PYTHON, Stack, grpc_port, tagless_port, tagless_servers

CGI_DIR = "cgi-stack"  # the cgi stack's files (lighttpd's config, CGI script, logs) in the server's state dir


class OffloadServers:
    """What `Lab` does with the offload server's processes."""

    @property
    def server_url(self) -> str:
        return f"http://{self.inv.host('server').address.ip}:{self.inv.server_port}"

    @property
    def grpc_target(self) -> str:
        """HOST:PORT of the Python gRPC server (data-plane addresses are IPv4)."""
        return self.grpc_target_of(PYTHON)

    def grpc_target_of(self, server: str) -> str:
        """HOST:PORT of the gRPC server in `server`'s language."""
        return f"{self.inv.host('server').address.ip}:{grpc_port(self.inv.grpc_port, server)}"

    def tagless_target_of(self, server: str) -> str:
        """HOST:PORT of the tagless server in `server`'s language."""
        return f"{self.inv.host('server').address.ip}:{tagless_port(self.inv.tagless_port, server)}"

    @property
    def tagless_targets(self) -> dict[str, str]:
        """Each tagless server it runs (Python's, and C++'s with the gRPC servers' cpp): language -> HOST:PORT."""
        return {s: self.tagless_target_of(s) for s in tagless_servers(self.grpc_servers)}

    @property
    def grpc_targets(self) -> dict[str, str]:
        """Each gRPC server it runs: language -> HOST:PORT (what the trial worker offloads to)."""
        return {s: self.grpc_target_of(s) for s in self.grpc_servers}

    def start_offload_server(self) -> None:
        server = self.host("server")
        addr = str(self.inv.host("server").address.ip)
        ports = ("--port", str(self.inv.server_port), "--grpc-port", str(self.inv.grpc_port))
        ports += ("--tagless-port", str(self.inv.tagless_port))
        if self.grpc_servers != (PYTHON,):
            ports += ("--grpc-servers", ",".join(self.grpc_servers))
        stack = ("--datasets", self.datasets) if self.datasets else ()  # a transfer sweep's
        if self.server_stack == Stack.CGI:  # lighttpd's files in the server's state dir; `down` removes it
            stack += ("--stack", "cgi", "--state-dir", str(server.state_dir / CGI_DIR))
        server.start("offload", server.python("server", "--bind", addr, *ports, *stack, *self.work_args()))
        health = self.wait_for_server()
        running = health.get("stack", "wsgi")
        if running != self.server_stack:  # a bug: the server was started with other flags
            raise RuntimeError(f"asked for the {self.server_stack} server stack, the server runs {running}")
        if (health.get("work_slots", 1), health.get("pace")) != (
            self.work_slots,
            self.pace and self.pace.name,
        ):
            raise RuntimeError(
                f"the server answers {health} to --work-slots {self.work_slots} --pace {self.pace}"
            )

    def work_args(self) -> tuple[str, ...]:
        """The server's flags for its work slots and pacing: a thread per connection a client may be
        sending on (each part of a request split over several holds one) beside each slot's, and the
        device profile in the server's state dir (`down` removes it)."""
        threads = max(8, len(self.client_roles) * self.parts + self.work_slots + 1)
        if self.work_slots == 1 and self.pace is None and threads == 8:
            return ()
        server = self.host("server")
        args = ("--work-slots", str(self.work_slots), "--threads", str(threads))
        if self.pace is not None:
            path = str(server.state_dir / "server-device.json")
            server.write(json.dumps(self.pace.as_dict()).encode(), path)
            args += ("--pace", path)
        return args

    def running_stack(self) -> str | None:
        """The stack the offload server says it runs (its /v1/health, asked from the client host); None
        when no server answers."""
        client = self.host("client")
        argv = client.python("client", "health", "--url", self.server_url, "--wait", "5")
        result = client.run(argv, limited=False, check=False, timeout=60)
        if not result.ok:
            return None
        return json.loads(result.stdout or "{}").get("stack", "wsgi")  # servers before stacks: wsgi

    def wait_for_server(self, timeout: float = 60.0) -> dict:
        """Ask from the client host, so the answer also proves the path through the switch."""
        client = self.host("client")
        result = client.run(
            client.python("client", "health", "--url", self.server_url, "--wait", str(timeout)),
            limited=False,
            check=False,
            timeout=timeout + 30,
        )
        if not result.ok:
            raise UserError(
                f"the offload server at {self.server_url} did not answer from the client: "
                f"{(result.stderr or result.stdout).strip()[-300:]}",
                f"see the server's log on {self.host('server').name}",
            )
        for server in self.grpc_servers:
            if not self.grpc_answers(timeout, server):
                offset = GRPC_SERVERS.index(server)
                port = "services.grpc_port" + (f" + {offset}" if offset else "")
                raise UserError(
                    f"the offload server's gRPC transport at {self.grpc_target_of(server)} ({server} "
                    "server) did not answer from the client",
                    f"is {port} free on {self.host('server').name}? see the server's log there",
                )
        for server, target in self.tagless_targets.items():
            if not self.tagless_answers(timeout, server):
                port = "services.tagless_port" + (" + 1" if server != PYTHON else "")
                raise UserError(
                    f"the offload server's tagless transport at {target} ({server} server) did not "
                    "answer from the client",
                    f"is {port} free on {self.host('server').name}? see the server's log there",
                )
        return json.loads(result.stdout or "{}")

    def tagless_answers(self, timeout: float = 2.0, server: str = PYTHON) -> bool:
        """Whether the client host's call to a tagless server is answered."""
        return self.host("client").agent(
            api.TaglessReady(target=self.tagless_target_of(server), wait=timeout), timeout=timeout + 30
        )

    def grpc_answers(self, timeout: float = 2.0, server: str = PYTHON) -> bool:
        """Whether the client host completes an HTTP/2 handshake with a gRPC server's port."""
        return self.host("client").agent(
            api.GrpcReady(target=self.grpc_target_of(server), wait=timeout), timeout=timeout + 30
        )

    def server_alive(self, grpc: bool = False, tagless: bool = False) -> bool:
        """The offload server runs (and, with `grpc`, each of its gRPC children answers: one can die
        alone; with `tagless`, each tagless server)."""
        if self.host("server").service_pid("offload") is None:
            return False
        if grpc and not all(self.grpc_answers(server=s) for s in self.grpc_servers):
            return False
        return not tagless or all(self.tagless_answers(server=s) for s in tagless_servers(self.grpc_servers))

    def restart_offload_server(self) -> None:
        """Stop what is left of the server (a master whose gRPC child died), then start it afresh."""
        self.host("server").stop("offload")
        self.start_offload_server()
