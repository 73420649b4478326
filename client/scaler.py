"""The `scaled` mode in a trial: each stage's CPU time times its kind of work's slowdown.

The client's stages by the client device's slowdowns; with a server device, the server's stages (the
CPU times it measured around exactly each stage and reported in `Server-Timing`) by the server
device's. Communication is measured, never scaled: the request's wall time minus the server's
measured (not scaled) stages. One exception, the cgi stack's process start-up, which the paper's
communication includes: with a server device whose profile gives its start-up (`stack:
server_start`, seconds on the device, calibrated into a slowdown like any work), the measured
start-up in communication is replaced by its CPU time times that slowdown (`t_server_start` becomes
it, `wall_server_start` keeps what was measured).
"""

from __future__ import annotations

from contracts.device import key, stack_key

CLIENT_STAGES = (("client_encode", "encode"), ("client_decode", "decode"))
SERVER_STAGES = (("server_decode", "decode"), ("server_compute", "kernel"), ("server_encode", "encode"))


class Scaler:
    """Turns a worker's measured record into the devices' times (scaled mode): `scale` for the client
    (None: the client runs as this host), `server_scale` for the server (None: as its host)."""

    def __init__(self, scale: dict[str, float] | None, server_scale: dict[str, float] | None = None) -> None:
        self.scale = scale
        self.server_scale = server_scale

    @staticmethod
    def _factor(scale: dict[str, float], kind: str, op: str, size: int, codec: str | None = None) -> float:
        k = key(kind, op, size, codec)
        if k not in scale:
            raise KeyError(f"no calibration for {k}: the sweep calibrates every op, size and method it runs")
        return scale[k]

    def factor(self, kind: str, op: str, size: int, codec: str | None = None) -> float:
        return self._factor(self.scale, kind, op, size, codec)

    def local(self, out: dict, op: str, size: int) -> None:
        if self.scale is None:
            return
        out["wall_total"] = out["t_total"]
        out["t_total"] = out["cpu_total"] * self.factor("kernel", op, size)

    def remote(self, out: dict, op: str, size: int, codec: str) -> None:
        for scale, stages in ((self.scale, CLIENT_STAGES), (self.server_scale, SERVER_STAGES)):
            if scale is None:
                continue
            for stage, kind in stages:
                cpu = out.get(f"cpu_{stage}")
                if cpu is None:
                    raise ValueError(f"the trial has no CPU time for {stage}: the server did not report it")
                out[f"wall_{stage}"] = out[f"t_{stage}"]
                out[f"t_{stage}"] = cpu * self._factor(
                    scale, kind, op, size, codec if kind != "kernel" else None
                )
        if self.server_scale is None:  # the request as measured: communication and the server's stages
            out["t_total"] = out["t_client_encode"] + out["t_request"] + out["t_client_decode"]
            return
        start = self.server_scale.get(stack_key("server_start"))  # a slowdown, as every stage's
        if start is not None and out.get("t_server_start") is not None:
            if out.get("cpu_server_start") is None:
                raise ValueError("the trial has no CPU time for server_start: the server did not report it")
            device_start = out["cpu_server_start"] * start
            out["wall_server_start"] = out["t_server_start"]
            out["t_comm"] += device_start - out["t_server_start"]
            out["t_server_start"] = device_start
        server = sum(out[f"t_{stage}"] for stage, _ in SERVER_STAGES)
        out["t_total"] = out["t_client_encode"] + out["t_comm"] + server + out["t_client_decode"]
