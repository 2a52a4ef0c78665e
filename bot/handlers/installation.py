"""`installation` and `installation_repositories`: keep the list of installed repositories.

The change is returned as data and recorded in the same transaction as the delivery, in one batch
however many repositories it names (an installation can bring tens of thousands)."""

from __future__ import annotations

from ..router import Intake, IntakeContext, Router, WebhookEvent
from ..store import RepoChange

ADDING = ("created", "new_permissions_accepted", "unsuspend")
REMOVING = ("deleted", "suspend")


def register(router: Router) -> None:
    router.add("installation", ADDING + REMOVING, on_installation)
    router.add("installation_repositories", ("added", "removed"), on_repositories)


def _names(event: WebhookEvent, key: str) -> tuple[str, ...]:
    items = event.get(key, kind=list, optional=True) or []
    return tuple(event.repo(key, i, "full_name") for i in range(len(items)))


def on_installation(event: WebhookEvent, ctx: IntakeContext) -> Intake:
    installation_id = event.id("installation", "id")
    account = event.login("installation", "account", "login", optional=True)
    if event.action in REMOVING:
        return Intake(repo_changes=[RepoChange(installation_id, remove_all=True)])
    repos = _names(event, "repositories")
    # created: the payload lists every repository of the installation
    return Intake(repo_changes=[RepoChange(installation_id, account, add=repos,
                                           exact=event.action == "created")])


def on_repositories(event: WebhookEvent, ctx: IntakeContext) -> Intake:
    installation_id = event.id("installation", "id")
    account = event.login("installation", "account", "login", optional=True)
    return Intake(repo_changes=[RepoChange(
        installation_id, account, add=_names(event, "repositories_added"),
        remove=_names(event, "repositories_removed"))])
