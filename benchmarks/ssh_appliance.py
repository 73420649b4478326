"""The embedded testbed's appliance reached over SSH, so that the benchmark can time the SSH backend.

A real lab is not at hand, so the embedded appliance stands in for one: the lab's view with its
appliance an `SshHost` whose connection goes through `sshd -i` started in the appliance's namespace
(as OpenSSH's ProxyCommand would), with a throw-away client key, host key and configuration. The
SSH protocol, its channel and the resident agent are the SSH backend's own; only the TCP hop is a
pipe. The agent runs the project's code from this checkout, as `up` would have synced it.
"""

from __future__ import annotations

import contextlib
import copy
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath

from benchmarks.session import BenchError
from testbed.backends.lab import Lab
from testbed.backends.netns import NetnsHost
from testbed.backends.ssh_host import SshHost
from testbed.inventory import HostSpec, SshSpec

REPO = Path(__file__).resolve().parent.parent
# an sshd of ours, started per connection (`sshd -i`) or as a daemon by the SSH tests: keys in `tmp`
SSHD_CONFIG = """\
HostKey {tmp}/hostkey
AuthorizedKeysFile {tmp}/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PidFile none
Subsystem sftp internal-sftp
"""


def _keygen(path: Path) -> None:
    done = subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], capture_output=True, text=True
    )
    if done.returncode:
        raise BenchError(f"ssh-keygen failed: {done.stderr.strip()}")


@contextmanager
def appliance_over_ssh(lab: Lab) -> Iterator[Lab]:
    """`lab` with its appliance reached over SSH (closed, and every file removed, afterwards)."""
    appliance = lab.host("appliance")
    if isinstance(appliance, SshHost):  # an SSH lab already
        yield lab
        return
    if not isinstance(appliance, NetnsHost):
        raise BenchError(f"no SSH stand-in for a {type(appliance).__name__}")
    sshd = shutil.which("sshd") or "/usr/sbin/sshd"
    if not Path(sshd).exists() or shutil.which("ssh-keygen") is None:
        raise BenchError("no OpenSSH server here (scripts/setup.sh installs openssh-server)")
    privsep = Path("/run/sshd")  # sshd refuses to start without it
    made_privsep = not privsep.exists()
    with tempfile.TemporaryDirectory(prefix="bench-ssh-") as name:
        tmp = Path(name)
        _keygen(tmp / "id_ed25519")
        _keygen(tmp / "hostkey")
        shutil.copy(tmp / "id_ed25519.pub", tmp / "authorized_keys")
        # the host key is ours: known before the first contact, and checked (strict), as in a lab
        key_type, key = (tmp / "hostkey.pub").read_text().split()[:2]
        (tmp / "known_hosts").write_text(f"{appliance.netns} {key_type} {key}\n")
        (tmp / "sshd_config").write_text(SSHD_CONFIG.format(tmp=tmp))
        privsep.mkdir(mode=0o755, exist_ok=True)
        spec = HostSpec(
            "appliance",
            appliance.name,
            None,
            SshSpec(
                host=appliance.netns,
                key=str(tmp / "id_ed25519"),
                known_hosts=str(tmp / "known_hosts"),
                host_key="strict",
            ),
            ports=appliance.spec.ports,
            python=sys.executable,
        )
        host = SshHost(
            spec,
            PurePosixPath(appliance.state_dir),
            PurePosixPath(REPO),
            proxy_command=shlex.join(
                ["ip", "netns", "exec", appliance.netns, sshd, "-i", "-f", str(tmp / "sshd_config")]
            ),
        )
        view = copy.copy(lab)
        view.hosts = {**lab.hosts, "appliance": host}
        try:
            yield view
        finally:
            host.close()
            if made_privsep:
                with contextlib.suppress(OSError):  # another sshd may have come to need it
                    os.rmdir(privsep)
