"""A device's power figures: what its energy model needs, each figure with where it comes from.

They live in the device profile's `power:` section (or a separate file with that section, for
`testbed analyze --power FILE`):

    power:
      cpu_active_w: {value: 68.4, source: "..."}
      cpu_idle_w:   {value: 13.7, source: "..."}
      radio_tx_w:   {value: 1.0, source: "..."}
      radio_rx_w:   {value: 1.0, source: "..."}
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from contracts.config import Section, load_yaml

FIGURES = ("cpu_active_w", "cpu_idle_w", "radio_tx_w", "radio_rx_w")


@dataclass(frozen=True)
class Power:
    cpu_active_w: float
    cpu_idle_w: float
    radio_tx_w: float
    radio_rx_w: float
    sources: dict[str, str]  # figure -> where it comes from

    def as_dict(self) -> dict:
        return {k: {"value": getattr(self, k), "source": self.sources[k]} for k in FIGURES}


def parse_power(sec: Section) -> Power:
    """Every figure, a non-negative number of watts, with a source beside it."""
    sec.reject_unknown(set(FIGURES))
    values, sources = {}, {}
    for key in FIGURES:
        item = sec.section(key)
        item.reject_unknown({"value", "source"})
        value = float(item.get("value", float))
        if not math.isfinite(value) or value < 0:
            raise item.error("value", f"{value:g} is not a non-negative number of watts")
        source = item.get("source", str).strip()
        if not source:
            raise item.error("source", "is empty", "say where the figure comes from")
        values[key], sources[key] = value, source
    return Power(**values, sources=sources)


def load_power(path: Path | str) -> Power:
    """A power file: YAML with a `power:` section (a device profile is one)."""
    return parse_power(load_yaml(Path(path), "power file").section("power"))


def power_of_profile(profile: dict, where: Path | str) -> Power | None:
    """The power figures of a device profile read back from a run's manifest (None: it has none)."""
    data = (profile.get("extra") or {}).get("power")
    if data is None:
        return None
    if not isinstance(data, dict):
        data = {"_": data}  # reported as an unknown key below
    return parse_power(Section(Path(where), "device profile", ("power",), data, None))
