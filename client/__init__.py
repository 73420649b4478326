"""The device side: offloading client (`client.offload`, `python -m client`), the sweep's worker, the
CPU limit, iperf3 and calibration helpers. Runs on the client host, under its CPU limit."""
