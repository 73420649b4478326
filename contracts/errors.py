"""The one exception type for problems a user can fix.

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
