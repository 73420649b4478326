"""The host agent: one entry point on every host, `python -m agent --serve`, JSON lines in and out.

The orchestrator reaches each host only through this agent (and through plain commands for the
wiring), the embedded backend with `ip netns exec`, a real lab over SSH, and keeps one agent process
per host for the life of a command. See `agent.verbs` for the
verbs and `agent.__main__` for the protocol.
"""
