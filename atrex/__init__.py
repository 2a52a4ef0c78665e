"""The `atrex` command: the composition root that puts the runner, agent and bot commands together."""
