"""atrex agent: the profiling-driven measure-and-fix loop (DESIGN §5).

baseline -> profile -> retrieve -> propose one change -> verify (runner) -> time against the
incumbent, interleaved -> accept only a significant gain -> record. The agent depends on the runner,
never on the bot; LLM, git and GitHub libraries are imported only when those features are used.
"""
