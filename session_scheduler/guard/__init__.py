"""What contains an agent: the Bash policy, the role's permissions, the OS sandboxes, the process sweep, hardened git."""
