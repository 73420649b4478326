"""`python -m agent --serve`: the resident host agent, one process per host for the life of a command.

Starting an interpreter costs ~200 ms, so the orchestrator starts the agent once and asks it verb
after verb. The protocol is JSON lines:

- the agent first says `{"ready": true, "pid": PID}`;
- each request is one line `{"verb": VERB, "args": {...}}`, its arguments the fields of the verb's
  request type (`contracts.agent_api`), decoded into it before the verb is called;
- each answer is one line: `{"ok": true, "result": ...}` (the verb's typed answer, encoded by
  `contracts.message`), `{"ok": false, "verb": VERB, "error": ..., "fix": ...}` for a problem the
  user can fix (a UserError), or `{"ok": false, "verb": VERB, "bug": TRACEBACK}` for anything else,
  a request that is not one included (an argument its request type lacks is a TypeError: a bug),
  so the orchestrator recognises errors by structure, never by their text, and a bug keeps its
  traceback;
- EOF on stdin ends the agent, so it never outlives the orchestrator that started it.

The answers go to a private copy of stdout; fd 1 becomes stderr and fd 0 /dev/null, so nothing a verb
or its children print can garble an answer or read a request.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from typing import TextIO

from agent.verbs import VERBS
from contracts.agent_api import VERB_TYPES
from contracts.errors import UserError
from contracts.message import decode, encode

USAGE = 'usage: python -m agent --serve (JSON lines: {"verb": ..., "args": {...}} in, one answer each out)'


def handle(line: str) -> dict:
    """The answer to one request line (never raises: a bad request is answered as a bug)."""
    try:
        request = json.loads(line)
    except json.JSONDecodeError as exc:
        return {"ok": False, "verb": None, "bug": f"a request that is not JSON ({exc.msg}): {line[:200]!r}"}
    if not isinstance(request, dict) or not isinstance(request.get("verb"), str):
        return {
            "ok": False,
            "verb": None,
            "bug": f'a request is {{"verb": ..., "args": {{...}}}}, not {line[:200]!r}',
        }
    verb, args = request["verb"], request.get("args", {})
    if verb not in VERBS:
        return {
            "ok": False,
            "verb": verb,
            "bug": f"unknown verb {verb!r} (this agent has: {', '.join(VERBS)})",
        }
    if not isinstance(args, dict):
        return {
            "ok": False,
            "verb": verb,
            "bug": f"the arguments of {verb} must be a JSON object, not {args!r}",
        }
    try:
        typed = decode(VERB_TYPES[verb][0], args)  # a ReplayPlan is validated here: a UserError
        answer = {"ok": True, "result": encode(VERBS[verb](typed))}
        json.dumps(answer)  # a result that is not JSON is the verb's bug, answered as one
    except UserError as exc:
        return {"ok": False, "verb": verb, "error": exc.message, "fix": exc.fix}
    except Exception:
        return {"ok": False, "verb": verb, "bug": traceback.format_exc()}
    return answer


def serve(requests: TextIO, answers: TextIO) -> int:
    """Answer each request line until EOF."""
    _say(answers, {"ready": True, "pid": os.getpid()})
    for line in requests:
        if line.strip():
            _say(answers, handle(line))
    return 0


def _say(answers: TextIO, answer: dict) -> None:
    answers.write(json.dumps(answer) + "\n")
    answers.flush()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv != ["--serve"]:
        print(USAGE, file=sys.stderr)
        return 64
    requests = os.fdopen(os.dup(0), "r", encoding="utf-8")
    answers = os.fdopen(os.dup(1), "w", encoding="utf-8")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return serve(requests, answers)


if __name__ == "__main__":
    sys.exit(main())
