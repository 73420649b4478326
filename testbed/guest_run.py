"""Apply a `GuestPlan` (`testbed.guest`): the one place the guest touches the system.

In a temp dir of its own (`testbed-guest-*`): the `vmlinux` unpacked from the bzImage, the initramfs
(a newc cpio written here: busybox, the modules decompressed, /init), the scratch directory with the
command; then QEMU, waited for until the timeout, killed after it; the temp dir is removed whatever
happened. The command's stdout, stderr and exit status come back through the scratch directory.
"""

from __future__ import annotations

import ctypes
import gzip
import lzma
import signal
import subprocess
import tempfile
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from contracts.errors import UserError
from testbed.guest import PREFIX, GuestPlan, stage_two

PR_SET_PDEATHSIG = 1
# compressed payloads a bzImage may carry, as the kernel's scripts/extract-vmlinux looks for them
MAGICS: tuple[tuple[bytes, Callable[[bytes], bytes]], ...] = (
    (b"\xfd7zXZ\x00", lambda b: lzma.LZMADecompressor().decompress(b)),
    (b"\x1f\x8b\x08", lambda b: zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(b)),
    (b"\x5d\x00\x00", lambda b: lzma.LZMADecompressor(format=lzma.FORMAT_ALONE).decompress(b)),
)


@dataclass(frozen=True)
class GuestResult:
    returncode: int
    stdout: str
    stderr: str
    seconds: float  # QEMU's start to its exit (boot, the command, power-off)


class GuestTimeout(UserError):
    """The guest did not power off within the timeout: QEMU was killed, its temp dir removed."""

    def __init__(self, timeout: float, console: str) -> None:
        tail = " | ".join(line for line in console.strip().splitlines()[-3:] if line.strip())
        super().__init__(
            f"guest: no result within {timeout:g} s; QEMU killed and its scratch removed"
            + (f" (console: {tail})" if tail else ""),
            "a longer --timeout (under TCG the guest's CPU is several times slower than the host's)",
        )
        self.timeout = timeout


def extract_vmlinux(bzimage: bytes) -> bytes | None:
    """The ELF vmlinux inside a bzImage, or None (then the bzImage boots, more slowly)."""
    for magic, decompress in MAGICS:
        start = bzimage.find(magic)
        while start >= 0:
            try:
                out = decompress(bzimage[start:])
            except (lzma.LZMAError, zlib.error, EOFError):
                out = b""
            if out[:4] == b"\x7fELF":
                return out
            start = bzimage.find(magic, start + 1)
    return None


def module_bytes(source: Path) -> bytes:
    data = source.read_bytes()
    if source.suffix == ".xz":
        return lzma.decompress(data)
    if source.suffix == ".gz":
        return gzip.decompress(data)
    if source.suffix == ".zst":
        out = subprocess.run(["zstd", "-dc", str(source)], capture_output=True, check=True)
        return out.stdout
    return data


def cpio_newc(entries: list[tuple[str, int, bytes]]) -> bytes:
    """A newc cpio archive (what the kernel unpacks as an initramfs) of (path, mode, data); the
    directories each path needs come first."""
    dirs: list[str] = []
    for path, _, _ in entries:
        parts = path.strip("/").split("/")[:-1]
        for i in range(1, len(parts) + 1):
            d = "/".join(parts[:i])
            if d not in dirs:
                dirs.append(d)
    items = [(d, 0o040755, b"") for d in dirs] + [(p.strip("/"), m, b) for p, m, b in entries]
    out = bytearray()
    for ino, (name, mode, data) in enumerate([*items, ("TRAILER!!!", 0, b"")], start=1):
        fields = [ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(name) + 1, 0]
        out += b"070701" + b"".join(b"%08X" % f for f in fields) + name.encode() + b"\0"
        out += b"\0" * (-len(out) % 4) + data
        out += b"\0" * (-len(out) % 4)
    return bytes(out)


def write_boot_files(plan: GuestPlan, work: Path) -> None:
    """The temp dir's files: vmlinux (PVH), initramfs.cpio, scratch/command."""
    if plan.pvh:
        vmlinux = extract_vmlinux(plan.kernel.image.read_bytes())
        if vmlinux is None:
            raise UserError(f"guest: found no vmlinux inside {plan.kernel.image}", "boot the bzImage")
        (work / "vmlinux").write_bytes(vmlinux)
    entries = [("/init", 0o100755, plan.init_script().encode()), ("/stage2", 0o100755, stage_two().encode())]
    entries.append(("/bin/busybox", 0o100755, plan.busybox.read_bytes()))
    entries += [(m.guest_path, 0o100644, module_bytes(m.source)) for m in plan.modules]
    (work / "initramfs.cpio").write_bytes(cpio_newc(entries))
    scratch = work / "scratch"
    scratch.mkdir()
    (scratch / "command").write_text(plan.command_script())


def run_guest(plan: GuestPlan, tmp: Path | None = None) -> GuestResult:
    """Boot, run the command, collect its result; QEMU is always gone and the temp dir removed after."""
    with tempfile.TemporaryDirectory(prefix=PREFIX, dir=tmp) as name:
        work = Path(name)
        write_boot_files(plan, work)
        started = time.monotonic()
        proc = subprocess.Popen(
            plan.qemu_argv(work),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a Ctrl-C of the terminal reaches us, and we kill it
            preexec_fn=die_with_parent,
        )
        try:
            output, _ = proc.communicate(timeout=plan.timeout)
        except subprocess.TimeoutExpired:
            stop(proc)
            raise GuestTimeout(plan.timeout, read(work / "console.log")) from None
        finally:
            stop(proc)
        seconds = time.monotonic() - started
        return collect(work, proc.returncode, output.decode(errors="replace"), seconds)


def die_with_parent() -> None:
    """In QEMU's child before exec: SIGKILL when its parent dies (even by SIGKILL, where no finally runs)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


def read(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def collect(work: Path, qemu_status: int, qemu_output: str, seconds: float) -> GuestResult:
    scratch = work / "scratch"
    status = read(scratch / "status").strip()
    if not status.isdigit():
        console = (qemu_output + read(work / "console.log")).strip().splitlines()[-5:]
        raise UserError(
            f"guest: powered off without the command's exit status (QEMU exited {qemu_status}): "
            + " | ".join(console),
            "see the console lines; `testbed guest --dry-run` prints the plan",
        )
    return GuestResult(int(status), read(scratch / "stdout"), read(scratch / "stderr"), seconds)
