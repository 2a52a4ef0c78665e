"""atrex bot: the GitHub App — webhooks, durable jobs, check runs, sticky comments, slash commands.

Layout: `app` (Flask factory) -> `webhook` (verify, parse, route) -> `handlers/` (one module per
event family, recording jobs) -> `store` (durable job store) -> `worker` (lanes claiming jobs) ->
`jobs` (dispatch by kind) -> `tasks/` (evaluate, command, optimize) -> `effects` (idempotent GitHub
effects through `github.RepoApi`) and `render` (Markdown from the runner's reports).
"""
