"""The sandboxed side of the runner: everything that imports or runs repository code lives here
and only ever runs in the spawned worker process (`python -m runner.worker`)."""
