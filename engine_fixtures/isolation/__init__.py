"""What sandboxes and supervises a process tree: cgroup CPU quotas, one supervisor, roles, signals, leak checks.

Shared by the engine fixture, the mechanism benchmark and the load generator.
"""
