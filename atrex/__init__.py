"""The `atrex` command: the composition root putting the runner, agent and bot commands together."""
