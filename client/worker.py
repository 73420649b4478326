"""The sweep's trial worker: runs on the client host, under the device's CPU limit.

One long-lived process per sweep (starting Python under a 5% CPU quota costs seconds), fed one trial
per line of JSON on stdin and answering one line of JSON per trial on stdout. Inputs are random
matrices from the sweep's seed, the same for every method and repetition of an (op, size), made once
and outside the timed region.
"""

from __future__ import annotations

import argparse
import json
import sys
import zlib
from datetime import UTC, datetime

import numpy as np

from client.offload import OffloadClient, OffloadError, local, make_operands
from contracts.trials import LOCAL


class TrialWorker:
    def __init__(self, url: str, seed: int, timeout: float) -> None:
        self.client = OffloadClient(url, timeout=timeout)
        self.seed = seed
        self._operands: dict[tuple, list[np.ndarray]] = {}

    def operands(self, op: str, size: int, dtype: str) -> list[np.ndarray]:
        key = (op, size, dtype)
        if key not in self._operands:
            rng = np.random.default_rng(
                [self.seed, size, zlib.crc32(op.encode()), zlib.crc32(dtype.encode())]
            )
            self._operands[key] = make_operands(op, size, dtype, rng)
        return self._operands[key]

    def run(self, spec: dict) -> dict:
        out = {"trial": spec.get("trial")}
        try:
            operands = self.operands(spec["op"], int(spec["size"]), spec["dtype"])
            out["started_at"] = datetime.now(UTC).isoformat(timespec="milliseconds")
            if spec["method"] == LOCAL:
                _, seconds = local(spec["op"], operands)
                out.update(ok=True, t_total=seconds)
            else:
                _, stages = self.client.offload(spec["op"], operands, spec["method"])
                out.update(ok=True, **stages.as_dict())
        except OffloadError as exc:
            out.update(ok=False, error=f"server answered {exc.status}: {exc.error}: {exc.detail}"[:500])
        except Exception as exc:  # a failed trial is data, not the end of the sweep
            out.update(ok=False, error=f"{type(exc).__name__}: {exc}"[:500])
        return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m client.worker", description=__doc__)
    parser.add_argument("--url", required=True)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args(argv)
    worker = TrialWorker(args.url, args.seed, args.timeout)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        if line.strip():
            print(json.dumps(worker.run(json.loads(line))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
