"""The README is a user's guide that stays true: short, opening with the two commands of a fresh
machine, every `testbed` command it shows accepted by the real parser, every link into docs/ (and
between the docs pages) pointing at a file and heading that exist, and its Python lines running on
stored runs."""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
import tempfile
from pathlib import Path

import pandas as pd
import pytest

from contracts.run import Manifest
from testbed.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
MAX_LINES = 300
FIRST_COMMANDS = [
    "bash scripts/setup.sh && .venv/bin/testbed sweep experiments/smoke.yaml",
    "bash scripts/test.sh",
]
SHELL_LANGS = {"", "sh", "bash", "shell", "console"}
SHELL_OPERATORS = {"&&", "||", ";", "|", "&"}
STORED_RUNS = ["tests/data/runs/v1-tiny", "tests/data/runs/v3-tiny"]


def code_blocks(path: Path) -> list[tuple[int, str, list[tuple[int, str]]]]:
    """Every fenced code block: the line of its opening fence, its language, its (line, text)s."""
    blocks, current = [], None
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        fence = re.match(r"^\s*```\s*([\w+-]*)\s*$", line)
        if current is None and fence:
            current = (number, fence.group(1).lower(), [])
        elif current is not None and re.match(r"^\s*```\s*$", line):
            blocks.append(current)
            current = None
        elif current is not None:
            current[2].append((number, line))
    assert current is None, f"{path.name}: the code block opened on line {current[0]} is never closed"
    return blocks


def shell_lines(path: Path) -> list[tuple[int, str]]:
    """The shell code blocks' lines, a line ending in a backslash joined with the next."""
    joined = []
    for _, lang, lines in code_blocks(path):
        if lang not in SHELL_LANGS:
            continue
        start, parts = None, []
        for number, text in lines:
            start = number if start is None else start
            if text.rstrip().endswith("\\"):
                parts.append(text.rstrip()[:-1])
                continue
            parts.append(text)
            joined.append((start, " ".join(parts)))
            start, parts = None, []
        if parts:
            joined.append((start, " ".join(parts)))
    return joined


def commands_of(path: Path) -> list[tuple[int, str, list[str]]]:
    """Each `testbed ...` (or `.venv/bin/testbed ...`) command in the shell blocks: its line, the
    line's text and the arguments after `testbed`, up to a shell operator or a comment."""
    found = []
    for number, text in shell_lines(path):
        tokens = shlex.split(text, comments=True)
        for i, token in enumerate(tokens):
            if token == "testbed" or token.endswith("/testbed"):
                argv = []
                for arg in tokens[i + 1 :]:
                    if arg in SHELL_OPERATORS:
                        break
                    argv.append(arg)
                found.append((number, text.strip(), argv))
    return found


COMMANDS = commands_of(README)


def test_the_readme_is_at_most_300_lines():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_LINES, f"README.md has {len(lines)} lines; move details into docs/"


def test_the_readme_starts_with_the_two_commands_of_a_fresh_machine():
    text = README.read_text(encoding="utf-8")
    first_line, first_block, _ = code_blocks(README)[0]
    before = text.splitlines()[: first_line - 1]
    assert not [line for line in before if line.startswith("## ")], "a section before the two commands"
    assert first_block == "", "the first code block is the shell's"
    commands = [line for _, line in code_blocks(README)[0][2] if line.strip()]
    assert commands == FIRST_COMMANDS
    assert "sudo" not in "\n".join(commands)


def test_the_readme_shows_testbed_commands():
    assert len(COMMANDS) >= 20, "the README's code blocks should show the tour and the commands"


def test_every_subcommand_appears_in_the_readme():
    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    shown = {a for _, _, argv in COMMANDS for a in argv[:3] if a in subparsers.choices}
    assert set(subparsers.choices) - shown == set(), "subcommands the README never shows"


@pytest.mark.parametrize(("number", "text", "argv"), COMMANDS, ids=[f"README.md:{n}" for n, _, _ in COMMANDS])
def test_every_testbed_command_in_the_readme_parses(number, text, argv):
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            build_parser().parse_args(argv)
    except SystemExit as exc:
        if exc.code not in (0, None):
            pytest.fail(
                f"README.md line {number}: `{text}` is refused: {err.getvalue().strip().splitlines()[-1]}"
            )


def test_the_command_extraction_sees_what_a_reader_sees():
    """Comments, continuations and `&&` are handled as a shell would."""
    assert commands_in("x && .venv/bin/testbed sweep a.yaml  # run it\n") == [["sweep", "a.yaml"]]
    assert commands_in("testbed shape \\\n  --rate 20mbit\n") == [["shape", "--rate", "20mbit"]]
    assert commands_in("testbed exec client -- ip addr | head\n") == [["exec", "client", "--", "ip", "addr"]]


def commands_in(block: str) -> list[list[str]]:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "x.md"
        path.write_text(f"```\n{block}```\n", encoding="utf-8")
        return [argv for _, _, argv in commands_of(path)]


def test_a_refused_flag_fails_the_test_naming_the_line():
    err = io.StringIO()
    with pytest.raises(SystemExit) as info, contextlib.redirect_stderr(err):
        build_parser().parse_args(["sweep", "--no-such-flag"])
    assert info.value.code == 2 and "--no-such-flag" in err.getvalue()


# links: [text](target) outside code, relative targets only


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`|\*\*|\*", "", heading.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    result = set()
    in_code = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            in_code = not in_code
        match = None if in_code else re.match(r"^#{1,6}\s+(.*)$", line)
        if match:
            base = slug(match.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            result.add(base if count == 0 else f"{base}-{count}")
    return result


def links(path: Path) -> list[tuple[int, str]]:
    found, in_code = [], False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.lstrip().startswith("```"):
            in_code = not in_code
            continue
        if in_code:
            continue
        line = re.sub(r"`[^`]*`", "", line)  # inline code renders no link
        found += [(number, target) for target in re.findall(r"\]\(([^)\s]+)\)", line)]
    return found


def broken_links(path: Path) -> list[str]:
    problems = []
    for number, target in links(path):
        if re.match(r"^[a-z]+:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        where = f"{path.relative_to(ROOT)}:{number}: {target}"
        if not linked.exists():
            problems.append(f"{where}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            problems.append(f"{where}: no heading #{anchor} in {linked.relative_to(ROOT)}")
    return problems


def test_the_readme_links_into_docs_and_every_link_resolves():
    targets = [t for _, t in links(README)]
    assert any(t.startswith("docs/") for t in targets)
    linked_pages = {t.partition("#")[0] for t in targets if t.startswith("docs/")}
    unlinked = {f"docs/{p.name}" for p in DOCS} - linked_pages
    assert unlinked == set(), "docs pages the README does not link to"
    assert broken_links(README) == []


@pytest.mark.parametrize("page", DOCS, ids=[p.name for p in DOCS])
def test_every_relative_link_in_the_docs_resolves(page):
    assert broken_links(page) == []


def test_slugs_are_githubs():
    assert slug("Benchmarks: `testbed bench`") == "benchmarks-testbed-bench"
    assert slug("One testbed against four on one host (issue 25's check)") == (
        "one-testbed-against-four-on-one-host-issue-25s-check"
    )
    assert slug("Several clients, one server") == "several-clients-one-server"


# the README's Python lines: a run from Python


def readme_python() -> str:
    blocks = [lines for _, lang, lines in code_blocks(README) if lang == "python"]
    assert len(blocks) == 1, "the README shows one Python snippet"
    code = [text for _, text in blocks[0] if text.strip()]
    assert len(code) <= 5, "the snippet stays five lines"
    return "\n".join(code) + "\n"


def run_snippet(code: str, monkeypatch) -> dict:
    monkeypatch.chdir(ROOT)
    namespace: dict = {}
    exec(compile(code, str(README), "exec"), namespace)  # noqa: S102 - the README's own lines
    return namespace


def check_results(namespace: dict) -> None:
    assert isinstance(namespace["manifest"], Manifest)
    for name in ("trials", "table", "vectors"):
        frame = namespace[name]
        assert isinstance(frame, pd.DataFrame) and not frame.empty, name
    assert {"op", "size", "rate_mbps", "method"} <= set(namespace["table"].columns)
    assert {"op", "size", "method", "vector"} <= set(namespace["vectors"].columns)
    # each mark, followed by ~ where the emulation's error could flip it (`analysis.decisions`)
    assert set(" ".join(namespace["vectors"]["vector"]).split()) <= {"0", "1", "?", "-", "0~", "1~", "?~"}


@pytest.mark.parametrize("run_dir", STORED_RUNS)
def test_the_readme_python_lines_run_on_a_stored_run(run_dir, monkeypatch):
    code, count = re.subn(r'load_run\("[^"]*"\)', f'load_run("{run_dir}")', readme_python())
    assert count == 1, "the snippet calls load_run on one run directory, in double quotes"
    check_results(run_snippet(code, monkeypatch))


def test_the_readme_python_lines_run_as_written(monkeypatch):
    code = readme_python()
    run_dir = re.search(r'load_run\("([^"]*)"\)', code).group(1)
    if not (ROOT / run_dir).is_dir():
        pytest.skip(f"{run_dir} is not in this checkout")
    check_results(run_snippet(code, monkeypatch))
