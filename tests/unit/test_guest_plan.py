"""The stock-kernel guest's plan, checked without root or QEMU: which modules the initramfs loads and in
which order (from a captured modules.dep), the accelerator, QEMU's argv, the initramfs archive, the
vmlinux found inside a bzImage, and the apply step driven by a fake QEMU (a result; a timeout that
leaves nothing behind)."""

from __future__ import annotations

import gzip
import lzma
import os
import stat
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from contracts.errors import UserError
from testbed import cli
from testbed import guest as guest_mod
from testbed.guest import (
    Accel,
    choose_accel,
    is_static,
    module_order,
    parse_modules_dep,
    plan_guest,
)
from testbed.guest_run import GuestTimeout, cpio_newc, extract_vmlinux, module_bytes, run_guest
from tests.helpers import REPO

RELEASE = "6.1.0-56-amd64"
CAPTURED_DEP = REPO / "tests/data/captured" / f"modules.dep-{RELEASE}"
# the 11 modules that mounted the host's root over 9p under an overlay by hand (issue 48)
BY_HAND = {
    "virtio_ring",
    "virtio",
    "virtio_pci_legacy_dev",
    "virtio_pci_modern_dev",
    "virtio_pci",
    "netfs",
    "fscache",
    "9pnet",
    "9pnet_virtio",
    "9p",
    "overlay",
}
TCG = Accel("tcg", "test")


def elf64(interp: bool) -> bytes:
    """A minimal ELF64 header with one program header: PT_INTERP (3) for a dynamic one, PT_LOAD else."""
    header = bytearray(64)
    header[:5] = b"\x7fELF\x02"
    header[0x20:0x28] = (64).to_bytes(8, "little")  # e_phoff
    header[0x36:0x38] = (56).to_bytes(2, "little")  # e_phentsize
    header[0x38:0x3A] = (1).to_bytes(2, "little")  # e_phnum
    return bytes(header) + (3 if interp else 1).to_bytes(4, "little") + bytes(52)


@pytest.fixture
def host(tmp_path):
    """A machine's files as the guest reads them: /boot, /lib/modules (the captured modules.dep, each
    module a file), a static /bin/busybox."""
    root = tmp_path / "root"
    mods = root / "lib/modules" / RELEASE
    mods.mkdir(parents=True)
    (mods / "modules.dep").write_text(CAPTURED_DEP.read_text())
    for name in BY_HAND | {"sch_netem"}:
        path, _ = parse_modules_dep(CAPTURED_DEP.read_text())[name]
        (mods / path).parent.mkdir(parents=True, exist_ok=True)
        (mods / path).write_bytes(f"module {name}".encode())
    (root / "boot").mkdir()
    (root / "boot" / f"vmlinuz-{RELEASE}").write_bytes(b"bzImage")
    (root / "bin").mkdir()
    (root / "bin/busybox").write_bytes(elf64(interp=False))
    return root


def test_the_initramfs_loads_the_eleven_modules_each_after_what_it_needs(host):
    plan = plan_guest(["true"], 60, root=host, accel=TCG, qemu="qemu-system-x86_64")
    names = [m.name for m in plan.modules]
    assert set(names) == BY_HAND
    deps = parse_modules_dep(CAPTURED_DEP.read_text())
    by_path = {path: name for name, (path, _) in deps.items()}
    for i, name in enumerate(names):
        assert {by_path[d] for d in deps[name][1]} <= set(names[:i]), name
    loads = [line.split("/")[-1] for line in plan.init_script().splitlines() if "insmod" in line]
    assert loads == [f"{n}.ko" for n in names]


def test_a_module_built_into_the_kernel_is_not_loaded():
    deps = parse_modules_dep("kernel/fs/9p/9p.ko.xz: kernel/net/9p/9pnet.ko.xz\nkernel/net/9p/9pnet.ko.xz:\n")
    assert module_order(deps, ("virtio_pci", "9p")) == ["9pnet", "9p"]


def test_qemu_shares_the_root_read_only_and_the_scratch_writable_and_never_reboots(host):
    plan = plan_guest(["sh", "-c", "echo 'a b'"], 60, root=host, accel=TCG, qemu="/usr/bin/qemu")
    work = Path("/tmp/testbed-guest-x")
    argv = plan.qemu_argv(work)
    joined = " ".join(argv)
    assert argv[0] == "/usr/bin/qemu" and "-no-reboot" in argv
    assert argv[argv.index("-accel") + 1] == "tcg"
    assert argv[argv.index("-kernel") + 1] == str(work / "vmlinux")  # PVH: the unpacked kernel
    assert "path=/,security_model=none,readonly=on" in joined
    assert f"path={work / 'scratch'},security_model=none -device" in joined
    assert "readonly" not in argv[argv.index(f"local,id=scratch,path={work / 'scratch'},security_model=none")]
    assert plan.command_script() == "exec sh -c 'echo '\"'\"'a b'\"'\"''\n"
    text = "\n".join(plan.lines())
    assert text.splitlines()[0] == "accelerator: tcg (test)"
    assert "switch_root" in text and "sysrq-trigger" in text and "/bin/busybox <- " in text


def test_kvm_only_where_it_boots_a_stock_kernel():
    assert choose_accel("flags : fpu vmx sse", kvm_usable=True, pvm=False).name == "kvm"
    pvm = choose_accel("flags : fpu vmx sse", kvm_usable=True, pvm=True)
    assert pvm.name == "tcg" and "PVM" in pvm.line()
    assert choose_accel("flags : fpu sse", kvm_usable=True, pvm=False).name == "tcg"
    assert choose_accel("flags : fpu svm", kvm_usable=False, pvm=False).name == "tcg"


def test_every_missing_prerequisite_is_reported_at_once(tmp_path, monkeypatch):
    monkeypatch.setattr(guest_mod.shutil, "which", lambda name: None)
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin/busybox").write_bytes(elf64(interp=True))  # busybox, not busybox-static
    with pytest.raises(UserError) as err:
        plan_guest([], 0, root=tmp_path, accel=TCG)
    text = str(err.value)
    for part in ("no command", "--timeout", "qemu-system-x86_64", "no stock kernel", "busybox", "apt-get"):
        assert part in text, part


def test_a_static_executable_has_no_interpreter(tmp_path):
    (tmp_path / "static").write_bytes(elf64(interp=False))
    (tmp_path / "dynamic").write_bytes(elf64(interp=True))
    (tmp_path / "script").write_bytes(b"#!/bin/sh\n")
    assert [is_static(tmp_path / n) for n in ("static", "dynamic", "script")] == [True, False, False]


@pytest.mark.parametrize("compress", [lzma.compress, gzip.compress], ids=["xz", "gzip"])
def test_the_vmlinux_is_found_inside_a_bzimage(compress):
    vmlinux = b"\x7fELF" + os.urandom(2000)
    decoy = b"\xfd7zXZ\x00 not a stream \x1f\x8b\x08 nor this"
    assert extract_vmlinux(b"MZ setup" + decoy + compress(vmlinux) + b"\0" * 64) == vmlinux
    assert extract_vmlinux(b"MZ setup" + gzip.compress(b"not an ELF")) is None


def test_compressed_modules_are_unpacked(tmp_path):
    (tmp_path / "a.ko.xz").write_bytes(lzma.compress(b"ko"))
    (tmp_path / "b.ko").write_bytes(b"ko")
    assert module_bytes(tmp_path / "a.ko.xz") == module_bytes(tmp_path / "b.ko") == b"ko"


def read_cpio(data: bytes) -> dict[str, tuple[int, bytes]]:
    out, pos = {}, 0
    while True:
        assert data[pos : pos + 6] == b"070701" and pos % 4 == 0
        fields = [int(data[pos + 6 + 8 * i : pos + 14 + 8 * i], 16) for i in range(13)]
        mode, size, namesize = fields[1], fields[6], fields[11]
        name = data[pos + 110 : pos + 110 + namesize - 1].decode()
        pos += 110 + namesize
        pos += -pos % 4
        if name == "TRAILER!!!":
            return out
        out[name] = (mode, data[pos : pos + size])
        pos += size + (-size % 4)


def test_the_initramfs_is_a_newc_archive_with_its_directories_first():
    entries = read_cpio(cpio_newc([("/init", 0o100755, b"#!x"), ("/lib/modules/9p.ko", 0o100644, b"k" * 5)]))
    assert list(entries) == ["lib", "lib/modules", "init", "lib/modules/9p.ko"]
    assert stat.S_ISDIR(entries["lib"][0]) and entries["init"] == (0o100755, b"#!x")
    assert entries["lib/modules/9p.ko"][1] == b"kkkkk"


FAKE_QEMU = """#!{python}
import sys, time
argv = sys.argv
scratch = [a for a in argv if a.startswith("local,id=scratch")][0].split("path=")[1].split(",")[0]
command = open(scratch + "/command").read()
if "hang" in command:
    time.sleep(60)
open(scratch + "/stdout", "w").write("out:" + command)
open(scratch + "/stderr", "w").write("err")
open(scratch + "/status", "w").write("7\\n")
"""


@pytest.fixture
def fake_qemu_plan(host, tmp_path):
    qemu = tmp_path / "qemu"
    qemu.write_text(FAKE_QEMU.format(python=sys.executable))
    qemu.chmod(0o755)
    plan = plan_guest(["echo", "hi"], 20, root=host, accel=TCG, qemu=str(qemu))
    return replace(plan, pvh=False)  # the fake bzImage holds no vmlinux


def test_the_result_comes_back_through_the_scratch_directory(fake_qemu_plan, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    result = run_guest(fake_qemu_plan, tmp=work)
    assert (result.returncode, result.stdout, result.stderr) == (7, "out:exec echo hi\n", "err")
    assert list(work.iterdir()) == []


def test_a_guest_that_hangs_is_killed_at_the_timeout_and_leaves_nothing(fake_qemu_plan, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    plan = replace(fake_qemu_plan, command=("hang",), timeout=1)
    started = time.monotonic()
    with pytest.raises(GuestTimeout):
        run_guest(plan, tmp=work)
    assert time.monotonic() - started < 10
    assert list(work.iterdir()) == []


def test_dry_run_prints_the_plan(host, monkeypatch, capsys):
    real = guest_mod.plan_guest
    monkeypatch.setattr(
        guest_mod, "plan_guest", lambda cmd, t, **kw: real(cmd, t, root=host, accel=TCG, qemu="qemu")
    )
    assert cli.main(["guest", "--dry-run", "--timeout", "9", "--", "modprobe", "sch_netem"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("accelerator: tcg") and "timeout: 9 s" in out
    assert "exec modprobe sch_netem" in out and "qemu -nodefaults" in out
