"""The exception types that carry data: problems a user can fix, and bugs reported by a host.

The CLI prints a UserError as one line (message and fix) with no traceback; any other exception is a
bug and keeps its traceback.
"""

from __future__ import annotations


class UserError(Exception):
    """A problem the user can fix; `fix` says how."""

    def __init__(self, message: str, fix: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix

    def __str__(self) -> str:
        return f"{self.message} (fix: {self.fix})" if self.fix else self.message


class CommandError(UserError):
    """An external command failed; carries the command, its exit code and the tail of its output."""

    def __init__(self, host: str, argv: list[str], returncode: int, output: str, fix: str | None = None):
        tail = " | ".join(line for line in output.strip().splitlines()[-3:] if line.strip())
        cmd = " ".join(argv)
        super().__init__(f"on {host}: `{cmd}` exited with {returncode}" + (f": {tail}" if tail else ""), fix)
        self.host = host
        self.argv = argv
        self.returncode = returncode
        self.output = output


class AgentBug(Exception):
    """A host agent's verb failed with something other than a UserError: a bug, never the user's.

    Not a UserError, so the CLI keeps its traceback; its text carries the host, the verb and the
    agent's own traceback from the host (where the bug is).
    """

    def __init__(self, host: str, verb: str, detail: str) -> None:
        super().__init__(f"on {host}: the host agent's verb {verb} failed (a bug):\n{detail.rstrip()}")
        self.host = host
        self.verb = verb
        self.detail = detail
