"""Per-repository dashboards served by `atrex serve` (docs/dashboard.md)."""

from .views import register

__all__ = ["register"]
