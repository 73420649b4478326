"""The `scaled` mode in a trial: each client stage's CPU time times its kind of work's slowdown.

Communication and the server are measured, not scaled.
"""

from __future__ import annotations

from contracts.device import key


class Scaler:
    """Turns a worker's measured record into the device's times (scaled mode)."""

    def __init__(self, scale: dict[str, float]) -> None:
        self.scale = scale

    def factor(self, kind: str, op: str, size: int, codec: str | None = None) -> float:
        k = key(kind, op, size, codec)
        if k not in self.scale:
            raise KeyError(f"no calibration for {k}: the sweep calibrates every op, size and method it runs")
        return self.scale[k]

    def local(self, out: dict, op: str, size: int) -> None:
        out["wall_total"] = out["t_total"]
        out["t_total"] = out["cpu_total"] * self.factor("kernel", op, size)

    def remote(self, out: dict, op: str, size: int, codec: str) -> None:
        for stage, kind in (("client_encode", "encode"), ("client_decode", "decode")):
            out[f"wall_{stage}"] = out[f"t_{stage}"]
            out[f"t_{stage}"] = out[f"cpu_{stage}"] * self.factor(kind, op, size, codec)
        out["t_total"] = out["t_client_encode"] + out["t_request"] + out["t_client_decode"]
