"""Device profile files: `experiments/devices/NAME.yaml`, read and validated like experiments.

An experiment or the inventory names its client device (`client_device: NAME` or a path); every
problem is reported with the file, the line, the key and the fix.
"""

from __future__ import annotations

import re
from pathlib import Path

from contracts.config import Section, load_yaml
from contracts.device import DIRECTIONS, STACK_COSTS, DeviceProfile, SpeedCurve
from contracts.errors import UserError
from contracts.power import parse_power

DEVICES_DIR = Path(__file__).resolve().parent.parent / "experiments" / "devices"
_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,39}$")
KEYS = {
    "name", "description", "source", "cores", "blas_threads", "kernels", "marshalling", "power", "stack",
    "filters", "image_codecs",
}  # fmt: skip


def device_path(ref: str | Path) -> Path:
    """A name (a file in experiments/devices) or a path to a profile file."""
    text = str(ref)
    if _NAME.match(text) and not text.endswith((".yaml", ".yml")):
        path = DEVICES_DIR / f"{text}.yaml"
        if not path.exists():
            known = ", ".join(sorted(p.stem for p in DEVICES_DIR.glob("*.yaml")))
            raise UserError(f"no device profile named {text!r}", f"use one of: {known}, or a file path")
        return path
    return Path(text)


def load_device(ref: str | Path) -> DeviceProfile:
    from contracts.codecs import CODECS  # numpy: only when a profile is read
    from contracts.images import FORMATS, IMAGE_OPS
    from contracts.ops import OPS

    path = device_path(ref)
    doc = load_yaml(path, "device profile")
    doc.reject_unknown(KEYS)
    name = doc.get("name", str, path.stem)
    if not _NAME.match(name):
        raise doc.error("name", f"{name!r} must be lowercase letters, digits, '-' or '_'")
    matrix_ops = [op for op in OPS if op not in IMAGE_OPS]
    kernels_sec = doc.section("kernels", default_empty=doc.has("filters"))
    kernels_sec.reject_unknown(set(matrix_ops))
    kernels = {op: _curve(kernels_sec, op) for op in kernels_sec.data}
    filters = {}
    if doc.has("filters"):
        filters_sec = doc.section("filters")
        filters_sec.reject_unknown(set(IMAGE_OPS))
        filters = {op: _curve(filters_sec, op, images=True) for op in filters_sec.data}
    if not kernels and not filters:
        raise doc.error("kernels", "is empty", f"give GFLOP/s for at least one of: {', '.join(matrix_ops)}")
    marshalling_sec = doc.section("marshalling", default_empty=doc.has("filters"))
    marshalling_sec.reject_unknown(set(CODECS))
    marshalling = {}
    for codec in marshalling_sec.data:
        sec = marshalling_sec.section(codec)
        sec.reject_unknown(set(DIRECTIONS))
        marshalling[codec] = {d: _positive(sec, d) for d in DIRECTIONS}
    cores = doc.get("cores", int, 1)
    threads = doc.get("blas_threads", int, 1)
    if cores < 1:
        raise doc.error("cores", "must be at least 1")
    if not 1 <= threads <= cores:
        raise doc.error("blas_threads", f"must be between 1 and cores ({cores})")
    image_codecs = {}
    if doc.has("image_codecs"):
        codecs_sec = doc.section("image_codecs")
        codecs_sec.reject_unknown(set(FORMATS))
        for fmt in codecs_sec.data:
            sec = codecs_sec.section(fmt)
            sec.reject_unknown(set(DIRECTIONS))
            image_codecs[fmt] = {d: _positive(sec, d) for d in DIRECTIONS}
    stack = {}
    if doc.has("stack"):
        sec = doc.section("stack")
        sec.reject_unknown(set(STACK_COSTS))
        stack = {key: _positive(sec, key) for key in sec.data}
    extra = {}
    if doc.has("power"):
        parse_power(doc.section("power"))  # refused here, with file and line, not at analysis time
        extra["power"] = doc.raw("power")
    return DeviceProfile(
        name=name,
        kernels=kernels,
        marshalling=marshalling,
        cores=cores,
        blas_threads=threads,
        description=doc.get("description", str, ""),
        source=doc.get("source", str, ""),
        stack=stack,
        extra=extra,
        filters=filters,
        image_codecs=image_codecs,
    )


def _positive(sec: Section, key: str) -> float:
    value = float(sec.get(key, float))
    if not value > 0:
        raise sec.error(key, f"{value:g} is not a positive speed", "give MB/s (or GFLOP/s) above 0")
    return value


def _curve(sec: Section, op: str, images: bool = False) -> SpeedCurve:
    """`mul: 0.3` (one figure) or `mul: {400: 0.3, 1200: 0.12}` (GFLOP/s at sizes); with `images`,
    `gray: 0.4` or `gray: {0.3MP: 0.38, 4MP: 0.46}` (megapixels per second at image sizes, held as
    their pixel counts as the sweep's sizes are)."""
    raw = sec.raw(op)
    if isinstance(raw, dict):
        points = []
        sub = sec.section(op)
        for size in raw:
            points.append((_size(sec, op, size, images), _positive(sub, size)))
        return SpeedCurve(tuple(sorted(points)))
    return SpeedCurve(((1, _positive(sec, op)),))


def _size(sec: Section, op: str, size: object, images: bool) -> int:
    from contracts.grid import is_image_size, parse_sizes

    if images:
        fix = "write image sizes in megapixels, e.g. 0.3MP: 0.4"
        try:
            (pixels,) = parse_sizes(str(size), f"filters.{op}")
        except (UserError, ValueError):
            raise sec.error(op, f"{size!r} is not an image size", fix) from None
        if not is_image_size(pixels):
            raise sec.error(op, f"{size!r} is not an image size", fix)
        return pixels
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        raise sec.error(op, f"{size!r} is not a matrix size", "write sizes as whole numbers, e.g. 400: 0.3")
    return size


def check_device_covers(device: DeviceProfile, ops: list[str], methods: list[str], where: str) -> None:
    missing = device.missing(ops, methods)
    if missing:
        raise UserError(
            f"device {device.name} has no speed for {', '.join(missing)}, which {where} needs",
            f"add them to the device profile, or drop those ops/methods from {where}",
        )
