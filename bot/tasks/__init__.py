"""Job kinds: what a worker does with a claimed job (see `bot.jobs.tasks`)."""
