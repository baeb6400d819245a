#!/usr/bin/env bash
# Installs the official MCP Python SDK (`mcp` on PyPI) in a virtualenv for the MCP interop
# tests: `tests/mcp/venv.sh [DIR]` (default: target/mcp-venv). Idempotent and safe to run
# from several test binaries at once (flock); prints the venv's python on success.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
dir="${1:-$root/target/mcp-venv}"
# The SDK version the tests were written against; the newest 1.x speaks the same handshake.
spec="${EXECUTA_MCP_SDK:-mcp==2.3.0}"
mkdir -p "$(dirname "$dir")"
exec 9>"$dir.lock"
flock 9
if [ ! -f "$dir/.ready" ] || [ "$(cat "$dir/.ready")" != "$spec" ]; then
    rm -rf "$dir"
    python3 -m venv "$dir" >&2
    "$dir/bin/python" -m pip install --quiet --disable-pip-version-check "$spec" >&2
    printf '%s' "$spec" > "$dir/.ready"
fi
echo "$dir/bin/python"
