"""The sweep: its plan, its phases, its trials and the devices it emulates."""
