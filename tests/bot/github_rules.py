"""GitHub's rules that the fake enforces, as pure functions returning a `Refusal` (status and
GitHub's body) or None. Kept apart from the fake's state and routes so each rule reads on its own.

- installations and tokens: a token is minted only for an existing installation (404), not for a
  suspended one (403), and only with permissions and repositories the installation has (422);
- permissions: every endpoint needs a repository permission of the installation (GitHub answers
  403 "Resource not accessible by integration" when the App lacks it); see ENDPOINT_PERMISSIONS;
- check runs: a name, a head SHA that is a commit of the repository (422 "No commit found for
  SHA"), a known status, a conclusion when completed (never `stale`), output with a title and a
  summary, summary and text at most 65,535 bytes of UTF-8, at most 50 annotations per request with
  the required fields and a level of notice / warning / failure, at most 3 actions;
- comments: a body that is not blank and at most 65,536 bytes of UTF-8.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from .github_shapes import error, validation_error

NOT_ACCESSIBLE = "Resource not accessible by integration"
# What the App asks for (docs/bot.md, "Repository permissions"); an installation may have less.
DEFAULT_PERMISSIONS = {"checks": "write", "pull_requests": "write", "issues": "write",
                       "contents": "write", "metadata": "read"}
LEVELS = {"none": 0, "read": 1, "write": 2, "admin": 3}
OUTPUT_TEXT_BYTES = 65535  # check run output.summary and output.text
COMMENT_BODY_BYTES = 65536
MAX_ANNOTATIONS = 50
ANNOTATION_LEVELS = ("notice", "warning", "failure")
STATUSES = ("queued", "in_progress", "completed")
ACTIONS_ONLY_STATUSES = ("waiting", "requested", "pending")
CONCLUSIONS = ("action_required", "cancelled", "failure", "neutral", "success", "skipped",
               "timed_out")


@dataclass(frozen=True)
class Refusal:
    status: int
    message: str
    errors: list[dict] = field(default_factory=list)

    def body(self) -> dict:
        if self.status == 422:
            return validation_error(self.message, self.errors)
        return error(self.message, self.status)


def invalid(message: str, resource: str, field_name: str | None = None,
            code: str = "invalid") -> Refusal:
    detail = {"resource": resource, "code": code, "message": message}
    if field_name is not None:
        detail["field"] = field_name
    return Refusal(422, message, [detail])


# --- permissions -----------------------------------------------------------------------------

# (method, route) -> alternatives: any one (permission, level) grants the request. Comments and
# reactions on a pull request's thread are allowed with either Issues or Pull requests access.
READ, WRITE = "read", "write"
ENDPOINT_PERMISSIONS: dict[tuple[str, str], tuple[tuple[str, str], ...]] = {
    ("GET", "repo"): (("metadata", READ),),
    ("GET", "pulls"): (("pull_requests", READ),),
    ("POST", "pulls"): (("pull_requests", WRITE),),
    ("GET", "pull"): (("pull_requests", READ),),
    ("PATCH", "pull"): (("pull_requests", WRITE),),
    ("GET", "contents"): (("contents", READ),),
    ("GET", "git_ref"): (("contents", READ),),
    ("POST", "check_runs"): (("checks", WRITE),),
    ("GET", "check_run"): (("checks", READ),),
    ("PATCH", "check_run"): (("checks", WRITE),),
    ("GET", "commit_check_runs"): (("checks", READ),),
    ("GET", "issue"): (("issues", READ), ("pull_requests", READ)),
    ("GET", "issue_comments"): (("issues", READ), ("pull_requests", READ)),
    ("POST", "issue_comments"): (("issues", WRITE), ("pull_requests", WRITE)),
    ("GET", "comment"): (("issues", READ), ("pull_requests", READ)),
    ("PATCH", "comment"): (("issues", WRITE), ("pull_requests", WRITE)),
    ("DELETE", "comment"): (("issues", WRITE), ("pull_requests", WRITE)),
    ("POST", "reactions"): (("issues", WRITE), ("pull_requests", WRITE)),
    ("GET", "permission"): (("metadata", READ),),
    ("GET", "commit_pulls"): (("contents", READ),),
    ("GIT", "upload-pack"): (("contents", READ),),
    ("GIT", "receive-pack"): (("contents", WRITE),),
}


def grants(permissions: dict[str, str], needed: Iterable[tuple[str, str]]) -> bool:
    return any(LEVELS.get(permissions.get(name, "none"), 0) >= LEVELS[level]
               for name, level in needed)


def permission_refusal(permissions: dict[str, str], method: str, route: str) -> Refusal | None:
    needed = ENDPOINT_PERMISSIONS[(method, route)]
    return None if grants(permissions, needed) else Refusal(403, NOT_ACCESSIBLE)


def token_request_refusal(installation: dict[str, str], asked: object,
                          repositories: object, known_repos: set[str]) -> Refusal | None:
    """`POST /app/installations/{id}/access_tokens` body: a subset of the installation's
    permissions, repositories the installation has."""
    if asked is not None:
        if not isinstance(asked, dict):
            return invalid("permissions must be an object", "Installation", "permissions")
        for name, level in asked.items():
            if level not in ("read", "write") or not grants(installation, [(name, level)]):
                return invalid("The permissions requested are not granted to this "
                               "installation.", "Installation", "permissions")
    if repositories is not None:
        if not isinstance(repositories, list) or not all(isinstance(r, str)
                                                         for r in repositories):
            return invalid("repositories must be a list of names", "Installation",
                           "repositories")
        missing = [r for r in repositories if r not in known_repos]
        if missing:
            return invalid(f"There is at least one repository that does not exist or is not "
                           f"accessible to the parent installation: {missing[0]}",
                           "Installation", "repositories")
    return None


# --- check runs ------------------------------------------------------------------------------

def check_run_refusal(body: object, run: dict | None, commit_exists: bool) -> Refusal | None:
    """A create (`run` None) or an update of a check run."""
    if not isinstance(body, dict):
        return invalid("Invalid request: a JSON object is required", "CheckRun")
    if run is None:
        if not isinstance(body.get("name"), str) or not body["name"].strip():
            return invalid("name wasn't supplied.", "CheckRun", "name", "missing_field")
        if not isinstance(body.get("head_sha"), str):
            return invalid("head_sha wasn't supplied.", "CheckRun", "head_sha", "missing_field")
        if not commit_exists:
            return invalid(f"No commit found for SHA: {body['head_sha']}", "CheckRun",
                           "head_sha")
    return _status_refusal(body, run) or _output_refusal(body.get("output")) or \
        _actions_refusal(body.get("actions"))


def _status_refusal(body: dict, run: dict | None) -> Refusal | None:
    status = body.get("status")
    if status in ACTIONS_ONLY_STATUSES:
        return invalid(f"Only GitHub Actions can set a status of {status}.", "CheckRun",
                       "status")
    if status is not None and status not in STATUSES:
        return invalid(f"Invalid status {status!r}", "CheckRun", "status")
    conclusion = body.get("conclusion")
    if conclusion == "stale":
        return invalid("You cannot change a check run conclusion to stale.", "CheckRun",
                       "conclusion")
    if conclusion is not None and conclusion not in CONCLUSIONS:
        return invalid(f"Invalid conclusion {conclusion!r}", "CheckRun", "conclusion")
    if conclusion is None and (status == "completed" or body.get("completed_at")):
        return invalid("Conclusion is required when status is completed or completed_at is "
                       "given.", "CheckRun", "conclusion", "missing_field")
    return None


def _utf8(text: str) -> int:
    return len(text.encode("utf-8", errors="surrogatepass"))


def _output_refusal(output: object) -> Refusal | None:
    if output is None:
        return None
    if not isinstance(output, dict):
        return invalid("output must be an object", "CheckRun", "output")
    for key in ("title", "summary"):
        if not isinstance(output.get(key), str) or not output[key]:
            return invalid(f"output.{key} wasn't supplied.", "CheckRun", f"output.{key}",
                           "missing_field")
    for key in ("summary", "text"):
        if isinstance(output.get(key), str) and _utf8(output[key]) > OUTPUT_TEXT_BYTES:
            # GitHub's words say characters; it counts UTF-8 bytes (a summary of 65,462
            # characters and 69,617 bytes was refused)
            return invalid(f"Invalid request.\n\nOnly {OUTPUT_TEXT_BYTES} characters are "
                           f"allowed; {_utf8(output[key])} were supplied.", "CheckRun",
                           f"output.{key}", "too_long")
    return annotations_refusal(output.get("annotations"))


def annotations_refusal(annotations: object) -> Refusal | None:
    if annotations is None:
        return None
    if not isinstance(annotations, list):
        return invalid("output.annotations must be an array", "CheckRun", "annotations")
    if len(annotations) > MAX_ANNOTATIONS:
        return invalid(f"Only {MAX_ANNOTATIONS} annotations are allowed per request "
                       f"(got {len(annotations)})", "CheckRun", "annotations", "too_long")
    for index, item in enumerate(annotations):
        problem = _annotation_problem(item)
        if problem:
            return invalid(f"output.annotations[{index}]: {problem}", "CheckRun",
                           "annotations")
    return None


def _annotation_problem(item: object) -> str | None:
    if not isinstance(item, dict):
        return "must be an object"
    for key, kind in (("path", str), ("start_line", int), ("end_line", int),
                      ("annotation_level", str), ("message", str)):
        if not isinstance(item.get(key), kind) or isinstance(item.get(key), bool):
            return f"{key} wasn't supplied."
    if item["annotation_level"] not in ANNOTATION_LEVELS:
        return (f"annotation_level {item['annotation_level']!r} is not one of "
                f"{', '.join(ANNOTATION_LEVELS)}")
    if item["start_line"] < 1 or item["end_line"] < item["start_line"]:
        return "start_line must be >= 1 and end_line >= start_line"
    if ("start_column" in item or "end_column" in item) and \
            item["start_line"] != item["end_line"]:
        return "start_column and end_column are only allowed when start_line equals end_line"
    if _utf8(item["message"]) > 65536 or len(item.get("title") or "") > 255:
        return "message or title is too long"
    return None


def _actions_refusal(actions: object) -> Refusal | None:
    if actions is None:
        return None
    if not isinstance(actions, list) or len(actions) > 3:
        return invalid("At most 3 actions are allowed", "CheckRun", "actions")
    for action in actions:
        if not isinstance(action, dict) or len(action.get("label") or "") not in range(1, 21) \
                or len(action.get("description") or "") not in range(1, 41) \
                or len(action.get("identifier") or "") not in range(1, 21):
            return invalid("An action needs a label (<= 20 characters), a description "
                           "(<= 40) and an identifier (<= 20)", "CheckRun", "actions")
    return None


# --- comments --------------------------------------------------------------------------------

def comment_body_refusal(body: object) -> Refusal | None:
    if not isinstance(body, str):
        return invalid("body wasn't supplied.", "IssueComment", "body", "missing_field")
    if not body.strip():
        return invalid("Body cannot be blank", "IssueComment", "body", "missing_field")
    if _utf8(body) > COMMENT_BODY_BYTES:
        return invalid(f"body is too long (maximum is {COMMENT_BODY_BYTES} characters)",
                       "IssueComment", "body", "too_long")
    return None
