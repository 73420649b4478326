"""The host agent: one entry point on every host, `python -m agent VERB`, JSON in and JSON out.

The orchestrator reaches each host only through this agent (and through plain commands for the
wiring), the embedded backend with `ip netns exec`, a real lab over SSH. See `agent.verbs` for the
verbs and `agent.__main__` for the protocol.
"""
