"""Job kinds: what a worker does with a claimed job (see `atrex.bot.jobs.tasks`)."""
