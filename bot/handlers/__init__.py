"""Webhook handlers, one module per event family, registered on one router."""

from __future__ import annotations

from ..router import Router
from . import check_run, installation, issue_comment, pull_request, push


def build_router() -> Router:
    router = Router()
    for module in (pull_request, issue_comment, check_run, installation, push):
        module.register(router)
    return router
