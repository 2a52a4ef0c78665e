"""Per-repository dashboards served by `atrex serve` (docs/dashboard.md)."""

from ..history import HistoryStore
from ..store import SqlStore
from .access import AccessStore
from .views import register


def ensure_tables(store: SqlStore) -> None:
    """Create the history's and the dashboards' tables (new tables beside the job store's)."""
    HistoryStore(store)
    AccessStore(store)


__all__ = ["ensure_tables", "register"]
