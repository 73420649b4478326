"""`python -m agent VERB`: read the verb's arguments as one JSON object on stdin, answer on stdout.

The answer is one JSON object: `{"ok": true, "result": ...}`, or `{"ok": false, "error": ..., "fix":
...}` with exit status 2 for a problem the user can fix, so the orchestrator recognises errors by
structure, never by their text. Any other exception is a bug: its traceback goes to stderr and the
exit status is 1.
"""

from __future__ import annotations

import json
import sys

from agent.verbs import VERBS
from contracts.errors import UserError


def main(argv: list[str] | None = None, stdin=None, stdout=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    stdin = stdin or sys.stdin
    stdout = stdout or sys.stdout
    if len(argv) != 1 or argv[0] not in VERBS:
        print(f"usage: python -m agent VERB (one of: {', '.join(VERBS)}) < ARGS.json", file=sys.stderr)
        return 64
    text = stdin.read().strip()
    try:
        args = json.loads(text) if text else {}
        if not isinstance(args, dict):
            raise UserError(f"{argv[0]}: the arguments must be a JSON object")
        result = VERBS[argv[0]](**args)
    except json.JSONDecodeError as exc:
        answer = {"ok": False, "error": f"{argv[0]}: arguments are not JSON: {exc.msg}", "fix": None}
        status = 2
    except UserError as exc:
        answer = {"ok": False, "error": exc.message, "fix": exc.fix}
        status = 2
    else:
        answer = {"ok": True, "result": result}
        status = 0
    stdout.write(json.dumps(answer) + "\n")
    stdout.flush()
    return status


if __name__ == "__main__":
    sys.exit(main())
