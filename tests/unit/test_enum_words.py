"""Roles, backends, modes and server stacks are compared through their enums (`contracts.hosts.Role`,
`Backend`, `contracts.device.Mode`, `contracts.stages.Stack`), never as words: a word compared in one
place and spelt otherwise in another would silently never match. Checked on the source's syntax tree."""

from __future__ import annotations

import ast

from contracts.device import Mode
from contracts.hosts import Backend, Role
from contracts.stages import Stack
from tests.helpers import REPO

PACKAGES = ("contracts", "agent", "appliance", "client", "server", "analysis", "testbed", "benchmarks")
WORDS = {str(member) for enum in (Role, Backend, Mode, Stack) for member in enum}


def _words(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value] if node.value in WORDS else []
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [w for element in node.elts for w in _words(element)]
    return []


def compared_words(source: str, where: str) -> list[str]:
    """Each comparison of `source` with one of the enums' words, as "where:line: word"."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                found += [f"{where}:{node.lineno}: {word!r}" for word in _words(side)]
    return found


def test_no_role_backend_mode_or_stack_is_compared_as_a_word():
    found = []
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            if not path.name.endswith("_pb2.py") and not path.name.endswith("_pb2_grpc.py"):
                found += compared_words(path.read_text(), str(path.relative_to(REPO)))
    assert found == []


def test_the_check_finds_a_word_compared_in_any_form():
    source = (
        'if role == "client":\n    pass\n'
        'ok = mode in ("scaled", "throttle")\n'
        'x = backend != "ssh" and stack == Stack.CGI\n'
        'host = lab.host("server")  # not a comparison\n'
    )
    assert compared_words(source, "m.py") == [
        "m.py:1: 'client'",
        "m.py:3: 'scaled'",
        "m.py:3: 'throttle'",
        "m.py:4: 'ssh'",
    ]


def test_the_enums_write_as_their_words():
    assert [str(m) for m in Role] == ["client", "appliance", "server"]
    assert Backend.NETNS == "netns" and Mode.SCALED == "scaled" and Stack.CGI == "cgi"
    assert f"{Role.CLIENT}-{Stack.WSGI}" == "client-wsgi"
