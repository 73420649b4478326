"""The lists a grid is written as, in an experiment file, a task stream or on the command line:
matrix sizes ('400,800' or the range '400-1200:100'), image sizes in megapixels ('0.3MP,4MP,8MP', for
the image ops of `contracts.images`), link rates ('10,20mbit,500kbit', a bare number in Mbit/s),
one-way delays ('0,25,50', ms) and losses ('0,1,5', % per direction); and `LinkPoint`, one point of a
sweep's link. One parser each, so that every command and file reads them alike.

A size in megapixels is held, and written to trials.csv and the manifest, as the pixel count of the
image the sweep generates at it (0.3MP: 640x480 = 307200, `contracts.images.dimensions`); image sizes
start at 0.05MP (49152 pixels), above every matrix size (at most 20000), so a size says which it is
(`is_image_size`). Matrix ops run at the matrix sizes of a grid, image ops at its image sizes
(`sizes_for`)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from contracts.errors import UserError
from contracts.units import parse_rate

_RANGE = re.compile(r"^\s*(\d+)\s*-\s*(\d+)\s*(?::\s*(\d+))?\s*$")
_MP = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*MP\s*$", re.IGNORECASE)
MIN_SIZE, MAX_SIZE = 2, 20000
MIN_MP, MAX_MP = 0.05, 64.0  # 0.05MP is 256x192 = 49152 pixels: above MAX_SIZE


def is_image_size(size: int) -> bool:
    """Whether a size of a grid is an image's pixel count (else a matrix's n)."""
    return size > MAX_SIZE


def sizes_for(op: str, sizes) -> tuple[int, ...]:
    """The sizes of a grid that `op` runs at: image sizes for an image op, matrix sizes for the others."""
    from contracts.images import is_image_op

    return tuple(s for s in sizes if is_image_size(s) == is_image_op(op))


def size_label(size: int) -> str:
    """How a size is shown: '400' for a matrix, '0.3MP' for an image."""
    from contracts.images import mp_label

    return mp_label(size) if is_image_size(size) else str(size)


def _megapixels(part: str, where: str) -> int | None:
    if not (m := _MP.match(part)):
        return None
    from contracts.images import pixels_of

    mp = float(m.group(1))
    if not MIN_MP <= mp <= MAX_MP:
        raise UserError(f"{where}: {part!r} is out of range", f"give images of {MIN_MP} to {MAX_MP:g}MP")
    return pixels_of(mp)


def _items(value) -> list:
    return value if isinstance(value, list) else [p for p in str(value).split(",") if p.strip()]


def parse_sizes(value, where: str = "sizes") -> tuple[int, ...]:
    """Sorted distinct sizes from a list, or from text of sizes and ranges 'FROM-TO:STEP' (inclusive,
    step 100 when omitted), e.g. 400-1200:100, and image sizes in megapixels, e.g. 0.3MP (as pixels)."""
    items: list[int] = []
    images: list[int] = []
    for part in _items(value):
        if isinstance(part, str) and (pixels := _megapixels(part, where)) is not None:
            images.append(pixels)
            continue
        if isinstance(part, str) and (m := _RANGE.match(part)):
            lo, hi, step = int(m.group(1)), int(m.group(2)), int(m.group(3) or 100)
            if lo > hi or step < 1:
                raise UserError(f"{where}: range {part!r} is empty", "write FROM-TO:STEP with FROM <= TO")
            items += list(range(lo, hi + 1, step))
            continue
        try:
            items.append(int(str(part).strip()))
        except ValueError:
            raise UserError(
                f"{where}: {part!r} is not a matrix size", "give integers, FROM-TO:STEP or megapixels (0.3MP)"
            ) from None
    if not items and not images:
        raise UserError(f"{where}: no sizes given", "give e.g. 400,800 or 400-1200:100 or 0.3MP,4MP")
    bad = [n for n in items if not MIN_SIZE <= n <= MAX_SIZE]
    if bad:
        raise UserError(
            f"{where}: size {bad[0]} is out of range", f"give sizes between {MIN_SIZE} and {MAX_SIZE}"
        )
    return tuple(sorted(set(items))) + tuple(sorted(set(images)))


# The unshaped link (`none` among the rates): no qdisc on the appliance's ports, the switch's own
# speed. Held as an unbounded rate, so a wire time over it is 0 and it sorts after every shaped
# rate; trials.csv writes it `inf`, the manifest `none`. Only the RPC study's sweep takes it
# (`testbed.experiment`): an offload decision needs a link of known rate.
UNSHAPED = math.inf
UNSHAPED_WORDS = ("none", "unshaped")


def is_unshaped(rate_mbps: float | None) -> bool:
    return rate_mbps is not None and math.isinf(rate_mbps)


def rate_label(rate_mbps: float) -> str:
    """`20 Mbit/s`, or `unshaped`."""
    return "unshaped" if is_unshaped(rate_mbps) else f"{rate_mbps:g} Mbit/s"


def parse_rates(value, where: str = "rates") -> tuple[float, ...]:
    """Sorted distinct rates in Mbit/s from a list, or from comma-separated text with or without units;
    `none` is the unshaped link (`UNSHAPED`)."""
    parts = _items(value)
    if not parts:
        raise UserError(f"{where}: no rates given", "give e.g. 10,20,40 (Mbit/s) or 500kbit")
    unshaped = {UNSHAPED for p in parts if str(p).strip().lower() in UNSHAPED_WORDS}
    shaped = {parse_rate(p, where) / 1e6 for p in parts if str(p).strip().lower() not in UNSHAPED_WORDS}
    return tuple(sorted(shaped | unshaped))


def rates_to_json(rates) -> list:
    """Rates as a manifest holds them: the unshaped link as `none` (JSON has no infinity)."""
    return ["none" if is_unshaped(r) else r for r in rates]


def rate_from_json(value) -> float | None:
    return UNSHAPED if value == "none" else value


MAX_DELAY_MS = 10_000.0  # netem's one-way delay; ten seconds is already far beyond any link studied
MAX_LOSS_PCT = 99.0  # per direction: at 100% nothing arrives, and no trial could run


def parse_delays(value, where: str = "delays") -> tuple[float, ...]:
    """Sorted distinct one-way delays in ms (each added in both directions: the RTT is twice it plus
    the link's own), from a list or comma-separated text; 0 is the link without added delay."""
    return _netem_values(value, where, "delay", "ms", MAX_DELAY_MS, "0,25,50 (ms, one way)")


def parse_losses(value, where: str = "losses") -> tuple[float, ...]:
    """Sorted distinct loss percentages per direction, from a list or comma-separated text."""
    return _netem_values(value, where, "loss", "%", MAX_LOSS_PCT, "0,1,5 (% per direction)")


def _netem_values(value, where: str, what: str, unit: str, most: float, example: str) -> tuple[float, ...]:
    parts = _items(value)
    if not parts:
        raise UserError(
            f"{where}: no {what}{'es' if what.endswith('s') else 's'} given", f"give e.g. {example}"
        )
    values = []
    for part in parts:
        text = str(part).strip().removesuffix(unit).removesuffix("ms").strip()
        try:
            number = float(text)
        except ValueError:
            raise UserError(f"{where}: {part!r} is not a {what}", f"give numbers, e.g. {example}") from None
        if not (math.isfinite(number) and 0 <= number <= most):
            raise UserError(
                f"{where}: {what} {part!r} is out of range", f"give values from 0 to {most:g} {unit}"
            )
        values.append(number)
    return tuple(sorted(set(values)))


@dataclass(frozen=True)
class LinkPoint:
    """One point of a sweep's link: its rate, and its one-way delay and loss per direction where the
    sweep varies them (None: not varied, the inventory's). What a group of trials is shaped to and
    validated at once (`testbed.sweep.plan.rate_groups`)."""

    rate_mbps: float
    delay_ms: float | None = None
    loss_pct: float | None = None

    def label(self) -> str:
        """E.g. `20 Mbit/s` or `20 Mbit/s, 25 ms, 1% loss`."""
        parts = [rate_label(self.rate_mbps)]
        if self.delay_ms is not None:
            parts.append(f"{self.delay_ms:g} ms delay")
        if self.loss_pct is not None:
            parts.append(f"{self.loss_pct:g}% loss")
        return ", ".join(parts)

    def seed_text(self) -> str:
        """What a group's shuffle is seeded with beside the experiment's seed: the rate alone when
        delay and loss are not varied (the order runs before them had)."""
        extra = [v for v in (self.delay_ms, self.loss_pct) if v is not None]
        return "-".join(str(v) for v in (self.rate_mbps, *extra)) if extra else str(self.rate_mbps)

    def sort_key(self) -> tuple[float, float, float]:
        return (self.rate_mbps, self.delay_ms or 0.0, self.loss_pct or 0.0)


def with_image(sizes, path: str) -> tuple[int, ...]:
    """The sizes with an image file's pixel count among them (`image:` in an experiment)."""
    from contracts.images import file_pixels, pixels_of

    pixels = file_pixels(path)
    if pixels < pixels_of(MIN_MP):  # a size must say it is an image's (`is_image_size`)
        raise UserError(
            f"image {path}: {pixels} pixels", f"give an image of at least {pixels_of(MIN_MP)} pixels"
        )
    return tuple(sorted({*sizes, pixels}))


def image_grid_problem(ops, sizes, methods, servers) -> str | None:
    """What is wrong with a grid's image ops (None: nothing): each op needs a size of its kind, and image
    ops offload over gRPC (the sweep's client sends images only there), each to those of the servers
    that have it (`contracts.stages.serves`; one that none of them has is refused). A
    device profile's figures for them (`filters`, `image_codecs`) are checked with the rest of it
    (`testbed.devices.check_device_covers`)."""
    from contracts.images import IMAGE_METHODS, SERVER_OPS, is_image_op

    for op in ops:
        if not sizes_for(op, sizes):
            kind = "an image size in megapixels (0.3MP)" if is_image_op(op) else "a matrix size (400)"
            return f"{op} needs {kind} in sizes"
    images = [op for op in ops if is_image_op(op)]
    if images and (http := [m for m in methods if m not in IMAGE_METHODS]):
        return f"image ops ({', '.join(images)}) are offloaded over grpc; not over {', '.join(http)}"
    for op in images if "grpc" in methods else ():
        if not [server for server in servers if op in SERVER_OPS.get(server, ())]:
            have = "; ".join(f"{s}: {', '.join(SERVER_OPS[s])}" for s in servers if s in SERVER_OPS)
            return f"no server in servers has {op} ({have})"
    return None
