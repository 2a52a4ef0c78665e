#!/usr/bin/env bash
# GitHub's published OpenAPI description of its REST API, from the npm package @octokit/openapi, for
# the bot tests that hold the GitHub fake and the bot's requests to it (tests/bot/openapi.py).
# Idempotent: does nothing when the checked file is already there. Usage: .ci/github-openapi.sh [DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=23.0.2
SHA256=829b4bebb19a53133289f7b0bc819f4f1118115821db2ca9f25e9ee995a7da2a
dest="${1:-.cache/github-openapi}"
file="$dest/api.github.com-$VERSION.json"
if [ -f "$file" ] && echo "$SHA256  $file" | sha256sum -c --quiet - 2>/dev/null; then
  exit 0
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "@octokit/openapi@$VERSION" >/dev/null \
  && tar xzf "octokit-openapi-$VERSION.tgz" package/generated/api.github.com.json)
echo "$SHA256  $tmp/package/generated/api.github.com.json" | sha256sum -c --quiet -
mkdir -p "$dest"
mv "$tmp/package/generated/api.github.com.json" "$file"
echo "GitHub OpenAPI description $VERSION -> $file"
