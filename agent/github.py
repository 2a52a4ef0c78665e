"""The few GitHub operations the agent needs, behind a small protocol.

:class:`PyGithubClient` implements it with PyGithub (imported lazily) on any ``github.Github``
instance: a token client for the command line (``from_token``, configurable ``base_url`` for GitHub
Enterprise) or the bot's App-authenticated one. The bot may also pass its own implementation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class PullRef:
    number: int
    url: str
    head: str
    base: str


class GitHubClient(Protocol):
    def default_branch(self, repo: str) -> str: ...

    def find_open_pull(self, repo: str, head_branch: str, marker: str) -> PullRef | None: ...

    def create_pull(self, repo: str, *, title: str, body: str, head: str,
                    base: str) -> PullRef: ...

    def update_pull(self, repo: str, number: int, *, title: str, body: str,
                    base: str) -> PullRef: ...


def _ref(pull) -> PullRef:
    return PullRef(number=pull.number, url=pull.html_url, head=pull.head.ref, base=pull.base.ref)


class PyGithubClient:
    def __init__(self, github):
        self._github = github

    @classmethod
    def from_token(cls, token: str, base_url: str = "https://api.github.com") -> PyGithubClient:
        from github import Auth, Github

        return cls(Github(auth=Auth.Token(token), base_url=base_url.rstrip("/")))

    def _repo(self, repo: str):
        return self._github.get_repo(repo)

    def default_branch(self, repo: str) -> str:
        return self._repo(repo).default_branch

    def find_open_pull(self, repo: str, head_branch: str, marker: str) -> PullRef | None:
        """The open PR from ``head_branch``, else any open PR whose body carries ``marker``."""
        handle = self._repo(repo)
        owner = repo.split("/")[0]
        for pull in handle.get_pulls(state="open", head=f"{owner}:{head_branch}"):
            if pull.head.ref == head_branch:
                return _ref(pull)
        for pull in handle.get_pulls(state="open"):
            if marker in (pull.body or ""):
                return _ref(pull)
        return None

    def create_pull(self, repo: str, *, title: str, body: str, head: str, base: str) -> PullRef:
        return _ref(self._repo(repo).create_pull(title=title, body=body, head=head, base=base))

    def update_pull(self, repo: str, number: int, *, title: str, body: str,
                    base: str) -> PullRef:
        pull = self._repo(repo).get_pull(number)
        pull.edit(title=title, body=body, base=base)
        return _ref(self._repo(repo).get_pull(number))
