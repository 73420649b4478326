"""A stock-kernel guest: the plan of one QEMU boot that runs a command as root under Debian's kernel.

This machine's own kernel may lack what the testbed needs (sch_netem, sch_fq, the openvswitch
module); Debian's `linux-image-amd64` has them. `GuestPlan` says, as data, everything one boot needs:
the kernel (its image, and the `vmlinux` unpacked from it for a PVH boot), the accelerator (KVM only
where it boots a stock kernel; a PVM `/dev/kvm` does not, so TCG), the modules the initramfs loads to
reach this machine's root over 9p (from `modules.dep`, each after what it depends on), the init
script and QEMU's argv. The root is shared read-only under a tmpfs overlay; a second 9p share, the
scratch directory, carries the command in and its stdout, stderr and exit status out.

`testbed guest --dry-run` prints the plan; `testbed.guest_run.run_guest` is the only place that
touches the system (writes the temp dir, starts QEMU, kills it at the timeout, removes everything).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from contracts.errors import UserError

PREFIX = "testbed-guest-"  # of the temp dir (and so of everything a boot creates)
SCRATCH_TAG = "tbscratch"  # the 9p mount tags
ROOT_TAG = "tbroot"
GUEST_SCRATCH = "/run/testbed-guest"  # where the command sees the scratch directory
STAGE_TWO = "/run/testbed-guest-init"  # the guest's PID 1 after switch_root
# what the initramfs needs to mount the host's root: virtio PCI, 9p over virtio, overlayfs (their
# dependencies come from modules.dep)
ROOT_MODULES = ("virtio_pci", "9pnet_virtio", "9p", "overlay")
PACKAGES = "linux-image-amd64 qemu-system-x86 busybox-static"
FIX = f"apt-get install {PACKAGES} (scripts/setup.sh installs them)"
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class Accel:
    """QEMU's accelerator and why, said in one line."""

    name: str  # "kvm" or "tcg"
    reason: str

    def line(self) -> str:
        return f"accelerator: {self.name} ({self.reason})"


@dataclass(frozen=True)
class Kernel:
    release: str  # e.g. 6.1.0-56-amd64
    image: Path  # /boot/vmlinuz-<release> (a bzImage)
    modules: Path  # /lib/modules/<release>


@dataclass(frozen=True)
class Module:
    name: str
    source: Path  # .ko, or .ko.xz / .ko.gz (decompressed into the initramfs)

    @property
    def guest_path(self) -> str:
        return f"/lib/modules/{self.name}.ko"


@dataclass(frozen=True)
class GuestPlan:
    kernel: Kernel
    accel: Accel
    modules: tuple[Module, ...]
    busybox: Path
    qemu: str
    command: tuple[str, ...]
    timeout: float
    memory_mb: int = 1024
    cpus: int = 1
    pvh: bool = True  # boot the unpacked vmlinux (about twice as fast to boot as the bzImage)
    host_root: Path = field(default=Path("/"))

    def init_script(self) -> str:
        return init_script(self.modules)

    def command_script(self) -> str:
        """What the guest runs (as root, in the host's root under the overlay): the command, quoted."""
        return f"exec {shlex.join(self.command)}\n"

    def qemu_argv(self, work: Path) -> list[str]:
        """QEMU's argv for a boot whose files live in `work` (vmlinux, initramfs, scratch, console)."""
        kernel = str(work / "vmlinux") if self.pvh else str(self.kernel.image)
        accel = (
            ["-accel", "kvm", "-cpu", "host"]
            if self.accel.name == "kvm"
            else ["-accel", "tcg", "-cpu", "max"]
        )
        return [
            self.qemu,
            "-nodefaults",
            "-no-user-config",
            "-machine",
            "q35",
            *accel,
            "-smp",
            str(self.cpus),
            "-m",
            f"{self.memory_mb}M",
            "-display",
            "none",
            "-monitor",
            "none",
            "-serial",
            f"file:{work / 'console.log'}",
            "-no-reboot",
            "-kernel",
            kernel,
            "-initrd",
            str(work / "initramfs.cpio"),
            "-append",
            "console=ttyS0 quiet panic=-1 rdinit=/init",
            "-fsdev",
            f"local,id=root,path={self.host_root},security_model=none,readonly=on,multidevs=remap",
            "-device",
            f"virtio-9p-pci,fsdev=root,mount_tag={ROOT_TAG}",
            "-fsdev",
            f"local,id=scratch,path={work / 'scratch'},security_model=none",
            "-device",
            f"virtio-9p-pci,fsdev=scratch,mount_tag={SCRATCH_TAG}",
        ]

    def initramfs(self) -> list[tuple[str, str]]:
        """The initramfs's files: (path in the guest, where it comes from)."""
        files = [("/init", "init, below"), ("/stage2", "stage 2, below"), ("/bin/busybox", str(self.busybox))]
        return files + [(m.guest_path, str(m.source)) for m in self.modules]

    def lines(self, work: Path = Path(f"$TMPDIR/{PREFIX}XXXXXX")) -> list[str]:
        """The plan as text (`testbed guest --dry-run`)."""
        boot = f"vmlinux unpacked from {self.kernel.image} (PVH)" if self.pvh else str(self.kernel.image)
        return [
            self.accel.line(),
            f"kernel: {self.kernel.release}, booting {boot}",
            f"timeout: {self.timeout:g} s (then QEMU is killed and {work} removed)",
            "initramfs:",
            *(f"  {path} <- {src}" for path, src in self.initramfs()),
            "init:",
            *(f"  {line}" for line in self.init_script().splitlines()),
            "stage 2:",
            *(f"  {line}" for line in stage_two().splitlines()),
            f"command ({work}/scratch/command, run as root in the guest):",
            f"  {self.command_script().strip()}",
            "qemu:",
            "  " + shlex.join(self.qemu_argv(work)),
        ]


def init_script(modules: tuple[Module, ...]) -> str:
    """The initramfs's /init: load the modules, mount the host's root read-only under a tmpfs overlay
    and the scratch directory, and switch to that root (so the kernel's module loader and `ip netns`
    see the host's files), where `stage_two` runs the command."""
    loads = "\n".join(f"$B insmod {m.guest_path}" for m in modules)
    s = GUEST_SCRATCH
    return f"""#!/bin/busybox sh
B=/bin/busybox
$B mkdir -p /proc /dev /lower /rw /root
$B mount -t proc proc /proc
$B mount -t devtmpfs dev /dev
{loads}
$B mount -t 9p -o ro,trans=virtio,version=9p2000.L,msize=262144 {ROOT_TAG} /lower
$B mount -t tmpfs rw /rw
$B mkdir -p /rw/upper /rw/work
$B mount -t overlay root -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work /root
$B mount -t proc proc /root/proc
$B mount -t sysfs sys /root/sys
$B mount -t devtmpfs dev /root/dev
$B mkdir -p /root/dev/pts /root/dev/shm
$B mount -t devpts devpts /root/dev/pts
for d in /run /dev/shm; do $B mount -t tmpfs tmp /root$d; done
$B mkdir -p /root{s}
$B mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 {SCRATCH_TAG} /root{s}
$B cp /stage2 /root{STAGE_TWO}
exec $B switch_root /root /usr/bin/env -i PATH={PATH} HOME=/root TERM=dumb /bin/sh {STAGE_TWO}
"""


def stage_two() -> str:
    """PID 1 in the host's root: run the command as root, its output and status to the scratch
    directory, then power off (sysrq; a reboot if that failed, which QEMU's -no-reboot ends too)."""
    s = GUEST_SCRATCH
    return f"""#!/bin/sh
echo testbed-guest >/proc/sys/kernel/hostname
ip link set lo up
# what a testbed needs of a booted machine: the cgroup v2 hierarchy with its cpu controller handed
# down (a client's CPU quota), and the tun device (the userspace OVS bridge's ports)
mount -t cgroup2 cgroup2 /sys/fs/cgroup && echo +cpu >/sys/fs/cgroup/cgroup.subtree_control
modprobe tun
cd /
/bin/sh {s}/command </dev/null >{s}/stdout 2>{s}/stderr
echo $? >{s}/status.tmp && mv {s}/status.tmp {s}/status
sync
echo o >/proc/sysrq-trigger
sleep 5
echo b >/proc/sysrq-trigger
"""


def find_kernel(root: Path = Path("/"), release: str | None = None) -> Kernel | None:
    """The installed stock kernel: the given release, or the newest /boot/vmlinuz-* with modules."""
    found = []
    for image in (root / "boot").glob("vmlinuz-*"):
        rel = image.name.removeprefix("vmlinuz-")
        mods = root / "lib" / "modules" / rel
        if (mods / "modules.dep").is_file() and (release is None or rel == release):
            found.append(Kernel(rel, image, mods))
    found.sort(key=lambda k: [int(n) if n.isdigit() else n for n in re.split(r"(\d+)", k.release)])
    return found[-1] if found else None


def parse_modules_dep(text: str) -> dict[str, tuple[str, list[str]]]:
    """modules.dep as {name: (path, [paths it depends on])}; a name as modprobe spells it (9pnet_virtio)."""
    deps = {}
    for line in text.splitlines():
        if ":" not in line:
            continue
        path, _, rest = line.partition(":")
        name = re.sub(r"\.ko(\.\w+)?$", "", Path(path).name).replace("-", "_")
        deps[name] = (path.strip(), rest.split())
    return deps


def module_order(deps: dict[str, tuple[str, list[str]]], wanted: tuple[str, ...]) -> list[str]:
    """The modules to load for `wanted`, each after those it depends on; built-in ones are skipped."""
    by_path = {path: name for name, (path, _) in deps.items()}
    order: list[str] = []

    def visit(name: str) -> None:
        if name in order or name not in deps:
            return
        for dep in deps[name][1]:
            visit(by_path.get(dep, dep))
        order.append(name)

    for name in wanted:
        visit(name)
    return order


def choose_accel(cpuinfo: str, kvm_usable: bool, pvm: bool) -> Accel:
    """KVM only where it boots a stock kernel: /dev/kvm usable, the CPU's vmx or svm visible, and
    not a PVM hypervisor (kvm_pvm runs only PVM guests); TCG otherwise."""
    flags = set(re.findall(r"\b(vmx|svm)\b", cpuinfo))
    if not kvm_usable:
        return Accel("tcg", "no usable /dev/kvm")
    if pvm:
        return Accel("tcg", "/dev/kvm is PVM (kvm_pvm), which boots no stock kernel")
    if not flags:
        return Accel("tcg", "/dev/kvm present but the CPU shows no vmx/svm")
    return Accel("kvm", f"/dev/kvm with {'/'.join(sorted(flags))}")


def detect_accel() -> Accel:
    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    usable = os.path.exists("/dev/kvm") and os.access("/dev/kvm", os.R_OK | os.W_OK)
    return choose_accel(cpuinfo, usable, Path("/sys/module/kvm_pvm").exists())


def is_static(path: Path) -> bool:
    """An ELF executable with no program interpreter (PT_INTERP): runs in an initramfs without libc."""
    data = path.read_bytes()[:4096]
    if data[:4] != b"\x7fELF" or data[4] != 2:  # ELF64 only (x86-64)
        return False
    phoff = int.from_bytes(data[0x20:0x28], "little")
    size = int.from_bytes(data[0x36:0x38], "little")
    count = int.from_bytes(data[0x38:0x3A], "little")
    types = [int.from_bytes(data[phoff + i * size : phoff + i * size + 4], "little") for i in range(count)]
    return 3 not in types


def plan_guest(
    command: list[str],
    timeout: float,
    *,
    root: Path = Path("/"),
    release: str | None = None,
    accel: Accel | None = None,
    qemu: str | None = None,
    memory_mb: int = 1024,
    cpus: int = 1,
) -> GuestPlan:
    """The plan of one boot, after checking every prerequisite (all problems reported at once)."""
    problems = []
    if not command:
        problems.append("no command given (testbed guest -- COMMAND [ARGS...])")
    if timeout <= 0:
        problems.append(f"--timeout must be positive, not {timeout:g}")
    qemu = qemu or shutil.which("qemu-system-x86_64")
    if not qemu:
        problems.append("qemu-system-x86_64 is not installed")
    kernel = find_kernel(root, release)
    if kernel is None:
        what = f"kernel {release}" if release else "stock kernel"
        problems.append(f"no {what} in {root / 'boot'} with its modules in {root / 'lib/modules'}")
    busybox = root / "bin" / "busybox"
    if not busybox.is_file() or not is_static(busybox):
        problems.append(f"no statically linked {busybox} (busybox-static)")
    modules: tuple[Module, ...] = ()
    if kernel is not None:
        deps = parse_modules_dep((kernel.modules / "modules.dep").read_text())
        missing = [m for m in ROOT_MODULES if m not in deps and not builtin(kernel, m)]
        if missing:
            problems.append(f"kernel {kernel.release} has no module {', '.join(missing)}")
        modules = tuple(Module(n, kernel.modules / deps[n][0]) for n in module_order(deps, ROOT_MODULES))
    if problems:
        raise UserError("guest: " + "; ".join(problems), FIX)
    return GuestPlan(
        kernel=kernel,
        accel=accel or detect_accel(),
        modules=modules,
        busybox=busybox,
        qemu=qemu,
        command=tuple(command),
        timeout=timeout,
        memory_mb=memory_mb,
        cpus=cpus,
    )


def builtin(kernel: Kernel, name: str) -> bool:
    path = kernel.modules / "modules.builtin"
    return path.is_file() and any(
        Path(line).name.split(".ko")[0].replace("-", "_") == name for line in path.read_text().split()
    )
