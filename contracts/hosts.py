"""Who a host is and how the orchestrator reaches it: the roles of a testbed's hosts, and its backends.

String enums: a value compares equal to its string and writes as it (JSON, YAML, CSV), so the files and
the wire keep their words; the code compares with the members, never with the words.
"""

from __future__ import annotations

from enum import StrEnum


class Role(StrEnum):
    """A host's role. Further client hosts are "client2", "client3"...: their role is CLIENT's kind."""

    CLIENT = "client"
    APPLIANCE = "appliance"
    SERVER = "server"


class Backend(StrEnum):
    """How the testbed's hosts exist: network namespaces on this machine, or machines over SSH."""

    NETNS = "netns"
    SSH = "ssh"
