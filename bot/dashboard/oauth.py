"""Signing in with GitHub (the OAuth web flow of the GitHub App) and asking GitHub, as the signed-in
user, whether they can read a repository.

The App's client id and secret (ATREX_OAUTH_CLIENT_ID, ATREX_OAUTH_CLIENT_SECRET) identify atrex to
GitHub; the user's token is a user-to-server token: it can read a repository only where the user
can and the App is installed. Read access is GitHub's answer to `GET /repos/{owner}/{repo}` with
that token (404 for a private repository the user cannot see; `permissions.pull` otherwise).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from urllib.parse import urlencode

import requests
from github import Auth, Github, GithubException

from ..config import BotConfig
from ..github import make_retry


class OAuthError(Exception):
    """GitHub refused the sign-in (bad or expired code, wrong client secret, ...)."""


class Access(enum.Enum):
    READ = "read"
    NONE = "none"
    EXPIRED = "expired"  # the user's token no longer works: sign in again


@dataclass(frozen=True)
class GitHubUser:
    login: str
    id: int | None


class GitHubOAuth:
    def __init__(self, config: BotConfig):
        self.config = config

    @property
    def enabled(self) -> bool:
        return bool(self.config.oauth_client_id and self.config.oauth_client_secret)

    def authorize_url(self, state: str, redirect_uri: str) -> str:
        query = urlencode({"client_id": self.config.oauth_client_id,
                           "redirect_uri": redirect_uri, "state": state,
                           "allow_signup": "false"})
        return f"{self.config.web_url}/login/oauth/authorize?{query}"

    def exchange(self, code: str, redirect_uri: str) -> str:
        """The user's access token for the code GitHub sent back."""
        try:
            response = requests.post(
                f"{self.config.web_url}/login/oauth/access_token",
                data={"client_id": self.config.oauth_client_id,
                      "client_secret": self.config.oauth_client_secret, "code": code,
                      "redirect_uri": redirect_uri},
                headers={"Accept": "application/json"}, timeout=self.config.http_timeout_s)
            body = response.json()
        except (requests.RequestException, ValueError) as exc:
            raise OAuthError(f"GitHub's token endpoint did not answer usably: {exc}") from None
        if response.status_code != 200 or "access_token" not in body:
            raise OAuthError(body.get("error_description") or body.get("error")
                             or f"HTTP {response.status_code}")
        return body["access_token"]

    def _client(self, token: str) -> Github:
        c = self.config
        return Github(auth=Auth.Token(token), base_url=c.github_api_url,
                      retry=make_retry(c), timeout=int(c.http_timeout_s))

    def user(self, token: str) -> GitHubUser:
        try:
            me = self._client(token).get_user()
            return GitHubUser(me.login, me.id)
        except GithubException as exc:
            raise OAuthError(f"GitHub did not say who signed in ({exc.status})") from None

    def access(self, token: str, repo: str) -> Access:
        try:
            found = self._client(token).get_repo(repo)
        except GithubException as exc:
            if exc.status == 401:
                return Access.EXPIRED
            if exc.status in (403, 404):
                return Access.NONE
            raise
        permissions = found.permissions
        return Access.READ if permissions is None or permissions.pull else Access.NONE
