"""The gRPC offload servers by language: one contract (contracts/offload.proto), five implementations.

`python` is `server.grpc_service` (NumPy); `cpp` is server/cpp (gRPC C++ and Eigen), `go` is
server/go (gRPC-Go and plain loops), `java` is server/java (gRPC-Java and Apache Commons Math) and
`ruby` is server/ruby (Ruby's gRPC and its standard `matrix` library), each built by scripts/setup.sh
from Debian's packages. Each answers the same requests with the same results, refusals, limits and
`server-timing` trailer, so a sweep can put the server's language and its matrix library beside the
marshalling method as a dimension (the multi-language gRPC offloading studies in ../shared/papers/).

Every one takes the same flags: `--bind`, `--port`, `--max-body-mb`, `--parent` (stop when that
process is no longer the parent). Each listens on its own port (`contracts.stages.grpc_port`).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from contracts.errors import UserError
from contracts.stages import GRPC_SERVERS as LANGUAGES
from contracts.stages import PYTHON, TAGLESS_SERVERS

SERVER_DIR = Path(__file__).resolve().parent
# what the build leaves (scripts/setup.sh: make -C server/LANG); the compiled ones are the program
BINARIES = {
    "cpp": SERVER_DIR / "cpp" / "build" / "offload-server-cpp",
    "go": SERVER_DIR / "go" / "build" / "offload-server-go",
    "java": SERVER_DIR / "java" / "build" / "offload-server-java.jar",
    "ruby": SERVER_DIR / "ruby" / "build" / "ready",  # the generated code is there and loads
}
# the runtime a built server needs, and what it is started with before the build's file (Java: the
# serial collector, one collector thread beside the request's on a small host)
RUNTIMES = {
    "java": ("java", ["-XX:+UseSerialGC", "-jar"]),
    "ruby": ("ruby", []),
}
SCRIPTS = {"ruby": SERVER_DIR / "ruby" / "offload_server.rb"}  # run instead of the build's mark
# the tagless transport's servers (`contracts.stages.TAGLESS_SERVERS`): Python's module, C++'s build
TAGLESS_BINARIES = {"cpp": SERVER_DIR / "cpp_tagless" / "build" / "tagless-server-cpp"}


def parse_languages(text: str) -> tuple[str, ...]:
    """`python,cpp` -> ("python", "cpp"), in LANGUAGES' order; a user's error names an unknown one."""
    names = {n.strip() for n in text.split(",") if n.strip()}
    unknown = sorted(names - set(LANGUAGES))
    if unknown or not names:
        raise UserError(
            f"unknown gRPC server {', '.join(unknown) or text!r}", f"choose from {', '.join(LANGUAGES)}"
        )
    return tuple(n for n in LANGUAGES if n in names)


def program(language: str) -> list[str]:
    """The argv head that starts `language`'s server; every one but Python's must have been built
    (`make -C server/LANG`), and Java's and Ruby's runtime must be installed."""
    if language == PYTHON:
        return [sys.executable, "-m", "server.grpc_service"]
    if language not in BINARIES:
        raise UserError(f"unknown gRPC server {language!r}", f"choose one of {', '.join(LANGUAGES)}")
    binary = BINARIES[language]
    if not binary.is_file():
        raise UserError(f"the {language} gRPC server is not built ({binary})", "bash scripts/setup.sh")
    if language not in RUNTIMES:
        return [str(binary)]
    name, flags = RUNTIMES[language]
    runtime = shutil.which(name)
    if runtime is None:
        raise UserError(
            f"the {language} gRPC server needs {name}, which is not installed", "bash scripts/setup.sh"
        )
    return [runtime, *flags, str(SCRIPTS.get(language, binary))]


def grpc_argv(
    language: str, bind: str, port: int, max_body_mb: float, parent: int | None = None
) -> list[str]:
    """The command line of `language`'s gRPC server on bind:port with the HTTP server's body limit."""
    argv = [*program(language), "--bind", bind, "--port", str(port), "--max-body-mb", str(max_body_mb)]
    return argv + (["--parent", str(parent)] if parent is not None else [])


def tagless_argv(
    language: str, bind: str, port: int, max_body_mb: float, parent: int | None = None
) -> list[str]:
    """The command line of `language`'s tagless server (contracts.tagless), as `grpc_argv`'s."""
    if language == PYTHON:
        head = [sys.executable, "-m", "server.tagless_service"]
    elif language in TAGLESS_BINARIES:
        if not TAGLESS_BINARIES[language].is_file():
            raise UserError(
                f"the {language} tagless server is not built ({TAGLESS_BINARIES[language]})",
                "bash scripts/setup.sh",
            )
        head = [str(TAGLESS_BINARIES[language])]
    else:
        raise UserError(f"no {language} tagless server", f"choose one of {', '.join(TAGLESS_SERVERS)}")
    argv = [*head, "--bind", bind, "--port", str(port), "--max-body-mb", str(max_body_mb)]
    return argv + (["--parent", str(parent)] if parent is not None else [])
