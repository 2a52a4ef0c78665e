"""GitHub's published OpenAPI description of the REST API, as a checker of HTTP exchanges.

The description comes from the npm package `@octokit/openapi` (`.ci/github-openapi.sh` puts its
`api.github.com.json` under `.cache/github-openapi/`; `ATREX_GITHUB_OPENAPI=FILE` names another
copy). `OpenApi` finds the operation of a request (method and path template) and says what in a
request (path and query parameters, JSON body) or a response (documented status, JSON body) does not
conform, as one line per problem. Schemas are checked with `openapi-schema-validator` (OpenAPI 3.0
semantics: `nullable`, formats), `$ref`s resolved inside the description.

The GitHub fake (tests/bot/github_fake.py) runs every exchange it serves through this, so the bot's
and the agent's requests and the fake's own answers are held to what GitHub publishes.
"""

from __future__ import annotations

import functools
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SPEC_VERSION = "23.0.2"  # keep in step with .ci/github-openapi.sh
SPEC_ENV = "ATREX_GITHUB_OPENAPI"
ROOT = Path(__file__).resolve().parents[2]
DEFAULT_SPEC = ROOT / ".cache" / "github-openapi" / f"api.github.com-{SPEC_VERSION}.json"
SPEC_URI = "urn:github-rest-openapi"
FETCH_HINT = "run .ci/github-openapi.sh (npm pack @octokit/openapi) or set ATREX_GITHUB_OPENAPI"
METHODS = ("get", "put", "post", "delete", "patch", "head")


def spec_path() -> Path | None:
    """The description file to use, or None when it is not on this machine."""
    named = os.environ.get(SPEC_ENV)
    path = Path(named) if named else DEFAULT_SPEC
    return path if path.is_file() else None


@functools.lru_cache(maxsize=1)
def load() -> OpenApi | None:
    """The description on this machine (parsed once per process), or None."""
    path = spec_path()
    return OpenApi(json.loads(path.read_text())) if path is not None else None


@dataclass(frozen=True)
class Operation:
    method: str
    template: str
    pattern: re.Pattern
    pointer: str  # JSON pointer of the operation object in the description
    spec: dict

    @property
    def param_names(self) -> list[str]:
        return re.findall(r"\{([^}]+)\}", self.template)


def _escape(part: str) -> str:
    return part.replace("~", "~0").replace("/", "~1")


# Parameters whose values carry slashes (a file path, a ref such as heads/main).
SLASHED_PARAMS = ("{path}", "{ref}")


def _template_regex(template: str, slashed: bool) -> re.Pattern:
    parts = re.split(r"(\{[^}]+\})", template)
    out = []
    for part in parts:
        if part.startswith("{"):
            out.append("(.+)" if slashed and part in SLASHED_PARAMS else "([^/]+)")
        else:
            out.append(re.escape(part))
    return re.compile("^" + "".join(out) + "$")


class OpenApi:
    def __init__(self, spec: dict):
        from openapi_schema_validator import OAS30Validator, oas30_format_checker
        from referencing import Registry, Resource
        from referencing.jsonschema import DRAFT4

        _allow_null_in_nullable_enums(spec)
        self.spec = spec
        self.version = spec.get("info", {}).get("version", "?")
        self._validator_cls = OAS30Validator
        self._formats = oas30_format_checker
        self._registry = Registry().with_resource(
            SPEC_URI, Resource.from_contents(spec, default_specification=DRAFT4))
        self._exact: list[Operation] = []
        self._wide: list[Operation] = []
        for template, item in spec["paths"].items():
            for method in METHODS:
                if method in item:
                    pointer = f"/paths/{_escape(template)}/{method}"
                    operation = Operation(method.upper(), template,
                                          _template_regex(template, False), pointer,
                                          item[method])
                    self._exact.append(operation)
                    if any(p in template for p in SLASHED_PARAMS):
                        self._wide.append(Operation(method.upper(), template,
                                                    _template_regex(template, True), pointer,
                                                    item[method]))
        # literal segments first: /repos/{o}/{r}/pulls/{n} before /repos/{o}/{r}/{anything}
        key = lambda op: (-len(re.sub(r"\{[^}]+\}", "", op.template)), op.template)  # noqa: E731
        self._exact.sort(key=key)
        self._wide.sort(key=key)

    # --- finding the operation ---------------------------------------------------------------

    def find(self, method: str, path: str) -> tuple[Operation, dict[str, str]] | None:
        for bucket in (self._exact, self._wide):
            for op in bucket:
                if op.method != method.upper():
                    continue
                match = op.pattern.match(path)
                if match:
                    return op, dict(zip(op.param_names, match.groups(), strict=True))
        return None

    # --- requests ----------------------------------------------------------------------------

    def request_problems(self, method: str, path: str, query: list[tuple[str, str]],
                         body: bytes) -> list[str]:
        found = self.find(method, path)
        if found is None:
            return [f"{method} {path}: no such operation in GitHub's REST API"]
        op, path_params = found
        where = f"{method} {op.template}"
        problems = []
        params = {(p["in"], p["name"]): p for p in map(self._deref, op.spec.get("parameters", []))}
        for name, value in path_params.items():
            problems += self._param_problems(where, params.get(("path", name)), name, value)
        given: dict[str, list[str]] = {}
        for name, value in query:
            given.setdefault(name, []).append(value)
        for name, values in given.items():
            param = params.get(("query", name))
            if param is None:
                problems.append(f"{where}: unknown query parameter {name!r}")
                continue
            for value in values:
                problems += self._param_problems(where, param, name, value)
        for (place, name), param in params.items():
            if place == "query" and param.get("required") and name not in given:
                problems.append(f"{where}: missing required query parameter {name!r}")
        return problems + self._request_body_problems(where, op, body)

    def _param_problems(self, where: str, param: dict | None, name: str,
                        value: str) -> list[str]:
        if param is None:
            return [f"{where}: undocumented parameter {name!r}"]
        schema = self._deref(param.get("schema", {}))
        parsed: Any = value
        kind = schema.get("type")
        try:
            if kind == "integer":
                parsed = int(value)
            elif kind == "number":
                parsed = float(value)
            elif kind == "boolean":
                if value not in ("true", "false"):
                    raise ValueError(value)
                parsed = value == "true"
        except ValueError:
            return [f"{where}: parameter {name}={value!r} is not {kind}"]
        return [f"{where}: parameter {name}: {m}" for m in self._schema_problems(schema, parsed)]

    def _request_body_problems(self, where: str, op: Operation, body: bytes) -> list[str]:
        declared = op.spec.get("requestBody")
        empty = body.strip() in (b"", b"{}", b"null")
        if declared is None:
            return [] if empty else [f"{where}: a body was sent to an operation that takes none"]
        declared = self._deref(declared)
        if not body.strip():
            return [f"{where}: the request body is required"] if declared.get("required") else []
        media = declared.get("content", {}).get("application/json")
        if media is None:
            return [f"{where}: JSON body sent; the operation takes "
                    f"{sorted(declared.get('content', {}))}"]
        try:
            data = json.loads(body)
        except ValueError as exc:
            return [f"{where}: request body is not JSON: {exc}"]
        pointer = f"{op.pointer}/requestBody/content/application~1json/schema"
        return [f"{where}: request body: {m}" for m in self._pointer_problems(pointer, data)]

    # --- responses ---------------------------------------------------------------------------

    def response_problems(self, method: str, path: str, status: int, body: bytes,
                          content_type: str) -> list[str]:
        found = self.find(method, path)
        if found is None:
            return []  # the request was already reported
        op, _ = found
        where = f"{method} {op.template} -> {status}"
        responses = op.spec.get("responses", {})
        key = str(status) if str(status) in responses else "default"
        if key not in responses:
            if 400 <= status < 500:
                # GitHub's descriptions list only some of the 4xx an operation answers (a check
                # run's POST documents none, though GitHub answers 422 and 403): hold the body to
                # GitHub's general error shapes instead.
                return self._error_body_problems(where, status, body)
            return [f"{where}: status {status} is not documented for this operation "
                    f"(documented: {', '.join(sorted(responses))})"]
        response = self._deref(responses[key])
        media = response.get("content", {}).get("application/json")
        if media is None or "schema" not in media:
            if body.strip() and "json" in content_type and not response.get("content"):
                return [f"{where}: a JSON body where GitHub documents none"]
            return []
        if "json" not in content_type:
            return [f"{where}: content type {content_type!r}, documented application/json"]
        try:
            data = json.loads(body)
        except ValueError as exc:
            return [f"{where}: response body is not JSON: {exc}"]
        ref = responses[key].get("$ref")
        pointer = (ref[1:] if ref else f"{op.pointer}/responses/{key}") + \
            "/content/application~1json/schema"
        return [f"{where}: response body: {m}" for m in self._pointer_problems(pointer, data)]

    def _error_body_problems(self, where: str, status: int, body: bytes) -> list[str]:
        name = "validation-error" if status == 422 else "basic-error"
        try:
            data = json.loads(body)
        except ValueError as exc:
            return [f"{where}: error body is not JSON: {exc}"]
        return [f"{where}: error body ({name}): {m}"
                for m in self._pointer_problems(f"/components/schemas/{name}", data)]

    # --- schemas -----------------------------------------------------------------------------

    def _deref(self, node: dict) -> dict:
        while isinstance(node, dict) and "$ref" in node:
            target: Any = self.spec
            for part in node["$ref"].lstrip("#/").split("/"):
                target = target[part.replace("~1", "/").replace("~0", "~")]
            node = target
        return node

    @functools.lru_cache(maxsize=512)  # noqa: B019 - one description per process
    def _validator(self, pointer: str):
        return self._validator_cls({"$ref": f"{SPEC_URI}#{pointer}"}, registry=self._registry,
                                   format_checker=self._formats)

    def _pointer_problems(self, pointer: str, data: Any) -> list[str]:
        return [_describe(e) for e in self._validator(pointer).iter_errors(data)][:10]

    def _schema_problems(self, schema: dict, data: Any) -> list[str]:
        validator = self._validator_cls(schema, registry=self._registry,
                                        format_checker=self._formats)
        return [_describe(e) for e in validator.iter_errors(data)][:10]


def _allow_null_in_nullable_enums(node: Any) -> None:
    """`nullable: true` beside an `enum` that does not list null: GitHub means null is allowed
    (a queued check run's `conclusion` is null), but OpenAPI 3.0.3 validators read the enum
    strictly. Add null to such enums, in place."""
    if isinstance(node, dict):
        if node.get("nullable") is True and isinstance(node.get("enum"), list) \
                and None not in node["enum"]:
            node["enum"].append(None)
        for value in node.values():
            _allow_null_in_nullable_enums(value)
    elif isinstance(node, list):
        for value in node:
            _allow_null_in_nullable_enums(value)


def _describe(error) -> str:
    where = "/".join(str(p) for p in error.absolute_path) or "(root)"
    message = error.message if len(error.message) <= 300 else error.message[:300] + "…"
    return f"at {where}: {message}"
