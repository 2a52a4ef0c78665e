"""`installation` and `installation_repositories`: keep the list of installed repositories."""

from __future__ import annotations

from ..router import Intake, IntakeContext, Router, WebhookEvent
from ..store import SqlStore

ADDING = ("created", "new_permissions_accepted", "unsuspend")
REMOVING = ("deleted", "suspend")


def register(router: Router) -> None:
    router.add("installation", ADDING + REMOVING, on_installation)
    router.add("installation_repositories", ("added", "removed"), on_repositories)


def _names(event: WebhookEvent, key: str) -> list[str]:
    items = event.get(key, kind=list, optional=True) or []
    return [event.get(key, i, "full_name", kind=str) for i in range(len(items))]


def on_installation(event: WebhookEvent, ctx: IntakeContext) -> Intake:
    installation_id = event.get("installation", "id", kind=int)
    account = event.get("installation", "account", "login", kind=str, optional=True)
    if event.action in REMOVING:
        return Intake(after=[lambda store: store.remove_repos(installation_id)])
    repos = _names(event, "repositories")
    return Intake(after=[lambda store: store.add_repos(installation_id, account, repos)])


def on_repositories(event: WebhookEvent, ctx: IntakeContext) -> Intake:
    installation_id = event.get("installation", "id", kind=int)
    account = event.get("installation", "account", "login", kind=str, optional=True)
    added, removed = _names(event, "repositories_added"), _names(event, "repositories_removed")

    def apply(store: SqlStore) -> None:
        store.add_repos(installation_id, account, added)
        store.remove_repos(installation_id, removed)

    return Intake(after=[apply])
