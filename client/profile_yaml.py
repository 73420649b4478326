"""A device profile written as a file of experiments/devices."""

from __future__ import annotations

import json

from contracts.device import DeviceProfile


def profile_yaml(device: DeviceProfile, comment: str = "") -> str:
    """The profile as a file of experiments/devices (written by hand: a device needs no YAML library)."""
    lines = [f"# {line}" for line in comment.splitlines()]
    lines += [
        f"name: {device.name}",
        f"description: {json.dumps(device.description)}",
        f"source: {json.dumps(device.source)}",
        f"cores: {device.cores}",
        f"blas_threads: {device.blas_threads}",
        "kernels:                      # GFLOP/s of the operation's work at each size",
    ]
    for op, curve in device.kernels.items():
        lines.append(f"  {op}: {{{', '.join(f'{s}: {g:g}' for s, g in curve.points)}}}")
    lines.append("marshalling:                  # MB/s of matrix data")
    for codec, speeds in device.marshalling.items():
        lines.append(f"  {codec}: {{encode: {speeds['encode']:g}, decode: {speeds['decode']:g}}}")
    if device.filters:
        from contracts.grid import size_label

        lines.append("filters:                      # megapixels per second of each image op at each size")
        for op, curve in device.filters.items():
            if curve.points[0][0] == 1:  # one figure for every size
                lines.append(f"  {op}: {curve.points[0][1]:g}")
            else:
                lines.append(f"  {op}: {{{', '.join(f'{size_label(s)}: {g:g}' for s, g in curve.points)}}}")
    if device.image_codecs:
        lines.append("image_codecs:                 # MB/s of pixel data")
        for fmt, speeds in device.image_codecs.items():
            lines.append(f"  {fmt}: {{encode: {speeds['encode']:g}, decode: {speeds['decode']:g}}}")
    return "\n".join(lines) + "\n"
