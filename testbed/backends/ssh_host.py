"""Hosts of a real lab, reached over SSH with fabric.

Commands stay argv lists: they are quoted with shlex.join for the remote shell, and every value in
them comes from the validated inventory or from the tool itself. The project's roles run remotely as
`python -m ROLE` from a copy of the code synced by `up`. The host agent is resident: one agent per
host on one SSH channel for the life of the command.

`proxy_command` reaches a host through a command whose stdin and stdout carry the SSH connection
(OpenSSH's ProxyCommand: a jump host, or `sshd -i` in a namespace, as the benchmark does).
"""

from __future__ import annotations

import io
import shlex
import socket
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath

import paramiko
from fabric import Connection
from invoke.exceptions import CommandTimedOut

from contracts.command import Result
from contracts.errors import UserError
from testbed.backends.agent_link import AgentLink, Tail
from testbed.backends.host import Host
from testbed.inventory import HostSpec


def trust_host_keys(client: paramiko.SSHClient, known_hosts: str, policy: str) -> None:
    """Check the host's key against `known_hosts`, as OpenSSH does (fabric would accept any key).

    strict: a host whose key is not in the file is refused; accept-new: its key is recorded there on
    first contact (StrictHostKeyChecking=accept-new). A key that differs from the recorded one is
    refused either way (paramiko raises BadHostKeyException).
    """
    path = Path(known_hosts)
    if policy == "accept-new":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(exist_ok=True)
    if path.is_file():
        client.load_host_keys(str(path))  # also where AutoAddPolicy records new keys
    client.set_missing_host_key_policy(
        paramiko.AutoAddPolicy() if policy == "accept-new" else paramiko.RejectPolicy()
    )


def connection_error(host: str, where: str, exc: BaseException, known_hosts: str = "") -> UserError:
    if isinstance(exc, paramiko.BadHostKeyException):
        return UserError(
            f"{host} ({where}): its host key changed (it is not the key recorded in {known_hosts}); "
            "refusing to connect, as this is what a man-in-the-middle looks like",
            f"if the host was reinstalled, check its new key and remove the old one: ssh-keygen -R "
            f"{exc.hostname} -f {known_hosts}",
        )
    if isinstance(exc, paramiko.SSHException) and "not found in known_hosts" in str(exc):
        return UserError(
            f"{host} ({where}): its host key is not in {known_hosts or 'the known hosts'}; refusing an unknown host",
            "check the host's key and add it (ssh-keyscan, or connect once with ssh), or set "
            "ssh.host_key: accept-new in the inventory to record keys on first contact",
        )
    if isinstance(exc, paramiko.AuthenticationException):
        return UserError(
            f"{host} ({where}): SSH authentication failed: {exc}",
            "check the host's ssh.user and ssh.key in the inventory",
        )
    if isinstance(exc, socket.timeout | TimeoutError):
        return UserError(
            f"{host} ({where}): no answer (SSH connection timed out)",
            "check that the host is up and ssh.host/ssh.port are right",
        )
    return UserError(
        f"{host} ({where}): cannot connect over SSH: {exc}",
        "check that the host is up, reachable and runs sshd on ssh.port",
    )


class SshHost(Host):
    def __init__(
        self,
        spec: HostSpec,
        state_dir: PurePosixPath,
        code_dir: PurePosixPath,
        cgroup: str | None = None,
        env: Mapping[str, str] | None = None,
        proxy_command: str | None = None,
    ) -> None:
        assert spec.ssh is not None
        self.spec = spec
        self.state_dir = state_dir
        self.code_dir = code_dir
        self.cgroup = cgroup
        self.env = dict(env or {})
        self.proxy_command = proxy_command
        self._conn: Connection | None = None
        self._agent: AgentLink | None = None

    @property
    def where(self) -> str:
        s = self.spec.ssh
        return f"{s.user}@{s.host}:{s.port}"

    @property
    def conn(self) -> Connection:
        if self._conn is None:
            s = self.spec.ssh
            kwargs = {"banner_timeout": 15, "auth_timeout": 15}
            if s.key:
                kwargs.update(key_filename=s.key, look_for_keys=False, allow_agent=False)
            conn = Connection(
                s.host,
                user=s.user,
                port=s.port,
                connect_timeout=10,
                connect_kwargs=kwargs,
                gateway=self.proxy_command,
            )
            trust_host_keys(conn.client, s.known_hosts, s.host_key)
            try:
                conn.open()
            except Exception as exc:  # paramiko and socket errors of every kind
                raise connection_error(self.name, self.where, exc, s.known_hosts) from exc
            self._conn = conn
        return self._conn

    def close(self) -> None:
        if self._agent is not None:
            self._agent.close()
            self._agent = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    # ------------------------------------------------------------------ how the host is reached
    def _remote(self, argv: Sequence[str], env: Mapping[str, str]) -> str:
        """The remote shell's command line: argv quoted, with its environment, under sudo unless root."""
        full: list[str] = [str(a) for a in argv]
        if env:
            full = ["env", *[f"{k}={v}" for k, v in env.items()], *full]
        if self.spec.ssh.user != "root":
            full = ["sudo", "-n", "--", *full]
        return shlex.join(full)

    def python(self, module: str, *args: str) -> list[str]:
        return ["env", f"PYTHONPATH={self.code_dir}", self.spec.python, "-m", module, *args]

    def _exec(self, argv, *, timeout, env, input) -> Result:
        command = self._remote(argv, env)
        try:
            r = self.conn.run(
                command,
                hide=True,
                warn=True,
                timeout=timeout,
                in_stream=io.StringIO(input) if input is not None else False,
            )
        except CommandTimedOut as exc:
            raise UserError(
                f"on {self.name}: `{shlex.join(argv)}` did not finish within {timeout} s"
            ) from exc
        except (OSError, paramiko.SSHException) as exc:
            raise connection_error(self.name, self.where, exc) from exc
        return Result(self.name, shlex.split(command), r.exited, r.stdout, r.stderr)

    def _popen(self, argv, env, **kwargs) -> RemoteProcess:
        return RemoteProcess(self.conn, self._remote(argv, env), kwargs.get("stderr"))

    def _agent_exec(self, verb: str, payload: str, timeout: float) -> Result:
        """Through the host's resident agent, on a channel of the host's one connection."""
        if self._agent is None:
            argv = self.python("agent", "--serve")
            self._agent = AgentLink(self.name, argv, lambda tail: self._agent_process(argv, tail))
        return self._agent.ask(verb, payload, timeout)

    def _agent_process(self, argv: list[str], tail: Tail) -> RemoteProcess:
        try:
            return RemoteProcess(self.conn, self._remote(argv, {}), tail)
        except (OSError, paramiko.SSHException) as exc:
            raise connection_error(self.name, self.where, exc) from exc

    # ------------------------------------------------------------------ files (the records of `up`)
    def write(self, data: bytes, dst: str) -> None:
        self.conn.put(io.BytesIO(data), dst)

    def read(self, path: str) -> str | None:
        r = self.run(["cat", path], check=False, limited=False)
        return r.stdout if r.ok else None


class _ChannelStdin:
    def __init__(self, channel: paramiko.Channel) -> None:
        self._channel = channel
        self._file = channel.makefile_stdin("wb")

    def write(self, data: bytes) -> int:
        self._file.write(data)
        return len(data)

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._channel.shutdown_write()


class RemoteProcess:
    """A remote command with pipes, shaped like subprocess.Popen for the sweep's worker."""

    def __init__(self, conn: Connection, command: str, stderr=None) -> None:
        self.channel = conn.client.get_transport().open_session()
        self.channel.exec_command(command)
        self.stdin = _ChannelStdin(self.channel)
        self.stdout = self.channel.makefile("rb")
        self._stderr = stderr
        threading.Thread(target=self._drain_stderr, daemon=True).start()

    def _drain_stderr(self) -> None:
        f = self.channel.makefile_stderr("rb")
        for line in iter(f.readline, b""):
            if self._stderr is not None and not self._stderr.closed:
                self._stderr.write(line)
                self._stderr.flush()

    def poll(self) -> int | None:
        if self.channel.status_event.is_set():
            return self.channel.exit_status
        return -1 if self.channel.closed else None

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (status := self.poll()) is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired("remote worker", timeout)
            time.sleep(0.05)
        return status

    def kill(self) -> None:
        self.channel.close()
