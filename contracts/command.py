"""One way to run an external command: argv lists only, a result object back.

Every external program the tool starts (ip netns exec, ovs-vsctl, ethtool, iperf3 ...) goes through
`run`, so a test can swap it for canned results and `--dry-run` can print what would run.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from contracts.errors import CommandError, UserError


@dataclass(frozen=True)
class Result:
    host: str
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def check(self, fix: str | None = None) -> Result:
        if not self.ok:
            raise CommandError(self.host, self.argv, self.returncode, self.stderr or self.stdout, fix)
        return self


def run(
    argv: Sequence[str],
    *,
    host: str = "local",
    check: bool = True,
    timeout: float | None = None,
    env: Mapping[str, str] | None = None,
    input: str | None = None,
    preexec_fn: Callable[[], None] | None = None,
) -> Result:
    argv = [str(a) for a in argv]
    full_env = None if env is None else {**os.environ, **env}
    try:
        proc = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=full_env,
            input=input,
            preexec_fn=preexec_fn,
            check=False,
        )
    except FileNotFoundError as exc:
        raise UserError(
            f"on {host}: program {argv[0]!r} not found", "run scripts/setup.sh to install what is needed"
        ) from exc
    except subprocess.TimeoutExpired as exc:
        raise UserError(f"on {host}: `{' '.join(argv)}` did not finish within {timeout} s") from exc
    result = Result(host, argv, proc.returncode, proc.stdout, proc.stderr)
    return result.check() if check else result


def split_command(argv: list[str]) -> tuple[list[str], list[str]]:
    """Split `OPTIONS... -- CMD...` for the role CLIs that exec a command.

    argparse's REMAINDER would also swallow the options in front of `--`, so the split happens first.
    """
    if "--" not in argv:
        return list(argv), []
    i = argv.index("--")
    return list(argv[:i]), list(argv[i + 1 :])
