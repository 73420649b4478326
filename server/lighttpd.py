"""The `cgi` server stack's web server: lighttpd with mod_cgi, as the paper's server ran its requests.

`LighttpdPlan` is the whole plan: the configuration text, the CGI script that starts a fresh Python
per request, the JSON error pages, and the argv that runs lighttpd in the foreground (`-D`: no
daemonizing, so it stays the child of `python -m server`, whose pid file the host agent's `service`
verbs keep and whose process group `testbed down` stops, CGI children included). `python -m server
--stack cgi --dry-run` prints it, unit tests check it, and `write` puts it into the stack's own
directory in the testbed's state directory (documents, CGI script, logs, upload buffers).

The request bound: lighttpd refuses a body over `server.max-request-size` (KiB) before the CGI runs;
the bound is the server's limit (`contracts.limits`, `--max-body-mb`) rounded up to a KiB, and the
CGI refuses anything over the exact limit itself, so every body too large gets the same JSON 413 as
on the wsgi stack: from the CGI, or from lighttpd's error page for 413 (the same JSON).
"""

from __future__ import annotations

import json
import math
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

import server
from contracts.cpu_lock import ENV as CPU_LOCK_ENV
from contracts.limits import Limits
from contracts.profiles import BLAS_CORE_VAR, BLAS_THREAD_VARS, MALLOC_ENV
from server.handler import too_large_detail

SCRIPT = "offload.py"  # the CGI script; lighttpd runs it with `python` (cgi.assign by extension)
LOCK = "one-at-a-time.lock"  # requests decode, compute and encode one at a time, as on the wsgi stack
# passed on to every CGI process, so both stacks compute with the same BLAS threads and malloc (as the
# server's calibration, which runs the cgi script itself, does: without the malloc settings lighttpd's
# processes took 3-5 times their calibrated CPU time for RAW's encode of a 1200x1200 result) and, with
# replicas on the host, time their stages under the same CPU lock (contracts.cpu_lock)
PASSED_VARS = (*BLAS_THREAD_VARS, BLAS_CORE_VAR, *MALLOC_ENV, CPU_LOCK_ENV)


def find_lighttpd() -> str:
    """lighttpd's path: on PATH, or where Debian puts it (/usr/sbin, often not on a user's PATH)."""
    return shutil.which("lighttpd") or shutil.which("lighttpd", path="/usr/sbin:/sbin") or "lighttpd"


def _quote(text: str) -> str:
    """A lighttpd string literal (JSON's escaping is a subset lighttpd reads the same way)."""
    return json.dumps(str(text))


@dataclass(frozen=True)
class LighttpdPlan:
    """lighttpd serving the offload API through one CGI script, in `state_dir`."""

    bind: str
    port: int
    state_dir: Path  # the stack's own directory: nothing of it lives elsewhere
    max_body_mb: float = 256.0
    read_timeout: float = 20.0  # s a client may stay silent (lighttpd's max-read/write-idle)
    python: str = sys.executable  # the project's interpreter on this host
    project_root: str = str(Path(server.__file__).resolve().parent.parent)
    env: dict[str, str] = field(default_factory=dict)  # added to every CGI process's environment
    program: str = "lighttpd"  # its path where PATH may lack /usr/sbin (`find_lighttpd`)

    @property
    def limits(self) -> Limits:
        return Limits.from_mb(self.max_body_mb)

    @property
    def max_request_kib(self) -> int:
        """`server.max-request-size`: the server's limit, rounded up to lighttpd's unit (KiB)."""
        return math.ceil(self.limits.max_body / 1024)

    @property
    def docroot(self) -> Path:
        return self.state_dir / "www"

    @property
    def conf_path(self) -> Path:
        return self.state_dir / "lighttpd.conf"

    def path(self, what: str) -> Path:
        return {
            "error_log": self.state_dir / "logs" / "error.log",
            "access_log": self.state_dir / "logs" / "access.log",
            "uploads": self.state_dir / "uploads",
            "errors": self.state_dir / "errors",
            "lock": self.state_dir / LOCK,
        }[what]

    def argv(self) -> list[str]:
        """lighttpd in the foreground with this configuration."""
        return [self.program, "-D", "-f", str(self.conf_path)]

    def config(self) -> str:
        """lighttpd.conf."""
        env = {**self.env, "OFFLOAD_LOCK": str(self.path("lock"))}
        env_items = ", ".join(f"{_quote(k)} => {_quote(v)}" for k, v in sorted(env.items()))
        idle = max(1, math.ceil(self.read_timeout))
        lines = [
            "# offload-testbed: the cgi server stack (server/lighttpd.py); generated, do not edit",
            'server.modules = ("mod_rewrite", "mod_setenv", "mod_cgi", "mod_accesslog")',
            f"server.bind = {_quote(self.bind)}",
            f"server.port = {self.port}",
            f"server.document-root = {_quote(self.docroot)}",
            f"server.errorlog = {_quote(self.path('error_log'))}",
            f"accesslog.filename = {_quote(self.path('access_log'))}",
            f"server.upload-dirs = ({_quote(self.path('uploads'))})",
            "# the request bound: the server's --max-body-mb in KiB (the CGI checks the exact bytes)",
            f"server.max-request-size = {self.max_request_kib}",
            f"server.max-read-idle = {idle}",
            f"server.max-write-idle = {idle}",
            "# a connection is kept alive as the client asks (the sweep's connection policy), idle for",
            "# at most the read timeout, as on the wsgi stack",
            f"server.max-keep-alive-idle = {idle}",
            "# lighttpd's own errors (413 over the bound, 404, 405...) answer with the JSON pages in errors/",
            f"server.errorfile-prefix = {_quote(str(self.path('errors')) + '/')}",
            'mimetype.assign = (".html" => "application/json")',
            "# every API path to the one CGI script: PATH_INFO is /v1/...",
            f'url.rewrite-once = ("^(/v1/.*)$" => "/{SCRIPT}$1")',
            f'cgi.assign = (".py" => {_quote(self.python)})',
            f"setenv.add-environment = ({env_items})",
        ]
        return "\n".join(lines) + "\n"

    def script(self) -> str:
        """The CGI script: a fresh interpreter per request, the project's code on its path. With the
        replicas' CPU lock named, the start-up's imports (the heaviest CPU work of a request outside its
        stages) run holding it, as a timed stage does: the lock is taken before them and `main` lets it
        go once it has read the start-up's clocks, reporting the wait (`server.cgi.main`)."""
        return (
            "# offload-testbed: one request of the cgi stack (server/cgi.py); generated, do not edit\n"
            "import sys\n\n"
            f"sys.path.insert(0, {self.project_root!r})\n"
            "from contracts.cpu_lock import CpuLock  # noqa: E402\n\n"
            "lock = CpuLock.from_env()\n"
            "waited = lock.take()  # replicas: no other testbed's timed stage beside these imports\n"
            "from server.cgi import main  # noqa: E402\n\n"
            f"sys.exit(main(max_body_mb={self.max_body_mb!r}, start_lock=(lock, waited)))\n"
        )

    def error_pages(self) -> dict[str, str]:
        """lighttpd's own refusals, as the JSON the offload server answers with."""
        pages = {
            413: ("body too large", too_large_detail(self.limits.max_body)),
            404: ("not found", "the offload server serves POST /v1/ops/<op> and GET /v1/health"),
            405: ("method not allowed", "POST /v1/ops/<op>, GET /v1/health"),
            408: ("request timeout", f"the client was silent for {self.read_timeout:g} s"),
            500: ("internal error", "the CGI script failed; see the stack's error.log"),
        }
        return {f"{code}.html": json.dumps({"error": e, "detail": d}) for code, (e, d) in pages.items()}

    def plan(self) -> dict:
        """What `--dry-run` prints."""
        return {
            "argv": self.argv(),
            "files": {
                str(self.conf_path): self.config(),
                str(self.docroot / SCRIPT): self.script(),
                **{str(self.path("errors") / n): t for n, t in self.error_pages().items()},
            },
        }

    def write(self) -> None:
        """Create the stack's directory and files (rewritten on every start)."""
        for d in (self.docroot, self.path("errors"), self.path("uploads"), self.path("error_log").parent):
            d.mkdir(parents=True, exist_ok=True)
        for name, text in self.plan()["files"].items():
            Path(name).write_text(text)
