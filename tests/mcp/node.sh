#!/usr/bin/env bash
# Installs the official MCP TypeScript SDK (`@modelcontextprotocol/sdk` on npm) for the MCP
# interop tests driven by Node: `tests/mcp/node.sh [DIR]` (default: target/mcp-node).
# Idempotent and safe to run from several test binaries at once (flock); installs nothing
# globally; prints the directory (its node_modules holds the SDK) on success.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
dir="${1:-$root/target/mcp-node}"
# The newest 1.x when the tests were written (1.x has the progress race the tests guard
# against, typescript-sdk #2580); zod is its peer dependency, pinned so installs repeat.
sdk="${EXECUTA_MCP_TS_SDK:-1.32.2}"
zod="${EXECUTA_MCP_TS_ZOD:-4.6.7}"
spec="@modelcontextprotocol/sdk@$sdk zod@$zod"
mkdir -p "$(dirname "$dir")"
exec 9>"$dir.lock"
flock 9
if [ ! -f "$dir/.ready" ] || [ "$(cat "$dir/.ready")" != "$spec" ]; then
    rm -rf "$dir"
    mkdir -p "$dir"
    cat > "$dir/package.json" <<EOF
{
  "name": "executa-mcp-node-tests",
  "private": true,
  "description": "The MCP TypeScript SDK for executa's interop tests (written by tests/mcp/node.sh)",
  "dependencies": {
    "@modelcontextprotocol/sdk": "$sdk",
    "zod": "$zod"
  }
}
EOF
    (cd "$dir" && npm install --no-audit --no-fund --no-update-notifier --loglevel=error) >&2
    # Checked, not assumed: a registry that answered with something else fails here.
    installed="$(cd "$dir" && node -p 'require("./node_modules/@modelcontextprotocol/sdk/package.json").version')"
    if [ "$installed" != "$sdk" ]; then
        echo "node.sh: installed @modelcontextprotocol/sdk $installed, expected $sdk" >&2
        exit 1
    fi
    printf '%s' "$spec" > "$dir/.ready"
fi
echo "$dir"
