#!/usr/bin/env bash
# The DIRAC 9.1.22 venv the integration tests run in: integrations/dirac/.venv.
#
# Idempotent. The venv is rebuilt from scratch only when this script, DIRAC's version or the
# interpreter changes (the hash in .bootstrap-stamp); the extension alone is reinstalled when
# its pyproject.toml changes (.extension-stamp). Prints the time it took.
set -euo pipefail

DIRAC_VERSION=9.1.22
HERE=$(cd "$(dirname "$0")/.." && pwd)            # integrations/dirac
VENV=${FAIRMATCH_DIRAC_VENV:-$HERE/.venv}
PY=${PYTHON:-python3}
STAMP=$VENV/.bootstrap-stamp
EXT_STAMP=$VENV/.extension-stamp
EXT_PYPROJECT=$HERE/pyproject.toml
# gfal2-python builds against gfal2's C library, which Debian 12 does not package in a
# version it builds with; nothing the tests run imports it (only the storage plugins do).
EXCLUDED="gfal2-python"
START=$(date +%s)
say() { echo "[bootstrap +$(( $(date +%s) - START ))s] $*"; }
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)

install_build_deps() {
    # M2Crypto (swig, openssl), mysqlclient (libmysqlclient, pkg-config) and tornado 5 build from source
    local p missing=()
    for p in swig libssl-dev default-libmysqlclient-dev pkg-config build-essential mariadb-client; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
    done
    ((${#missing[@]})) || return 0
    say "apt-get install ${missing[*]}"
    local sudo; sudo=$([ "$(id -u)" = 0 ] || echo sudo)
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
}

build_venv() {
    say "creating $VENV"
    rm -rf "$VENV"
    "$PY" -m venv "$VENV"
    "${PIP[@]}" install --quiet --upgrade pip wheel setuptools packaging
    say "DIRAC==$DIRAC_VERSION (without its dependencies)"
    "${PIP[@]}" install --quiet --no-deps "DIRAC==$DIRAC_VERSION"
    # DIRAC's own requirement list (base + server + testing), read from its installed metadata
    "$VENV/bin/python" - "$EXCLUDED" > "$VENV/dirac-requirements.txt" <<'PYEOF'
import sys
from importlib.metadata import requires
from packaging.requirements import Requirement
excluded = set(sys.argv[1].split())
for line in requires("DIRAC"):
    req = Requirement(line)
    marker = str(req.marker or "")
    if req.name in excluded or (marker and not any(f'extra == "{e}"' in marker for e in ("server", "testing"))):
        continue
    req.marker = None
    print(req)
PYEOF
    say "DIRAC's $(wc -l < "$VENV/dirac-requirements.txt") requirements but $EXCLUDED (builds M2Crypto, mysqlclient, tornado)"
    # pip then says "dirac 9.1.22 requires gfal2-python, which is not installed": expected
    "${PIP[@]}" install --quiet -r "$VENV/dirac-requirements.txt" pytest pytest-timeout
    "${PIP[@]}" freeze > "$VENV/freeze.txt"   # what this build resolved to, for the record
}

install_extension() {
    # The extension's own dependencies, then the extension without them: letting pip resolve
    # DIRAC again would pull in gfal2-python.
    say "the extension (fairmatch-dirac, editable) from $HERE"
    "$VENV/bin/python" - "$EXT_PYPROJECT" > "$VENV/extension-requirements.txt" <<'PYEOF'
import sys, tomllib
from packaging.requirements import Requirement
deps = tomllib.load(open(sys.argv[1], "rb")).get("project", {}).get("dependencies", [])
print("\n".join(d for d in deps if Requirement(d).name.lower() not in {"dirac", "diraccommon"}))
PYEOF
    if [ -s "$VENV/extension-requirements.txt" ]; then
        "${PIP[@]}" install --quiet -r "$VENV/extension-requirements.txt"
    fi
    "${PIP[@]}" install --quiet --no-deps -e "$HERE"
}

install_build_deps

WANT=$({ cat "$0"; echo "$DIRAC_VERSION $("$PY" -V 2>&1)"; } | sha256sum | cut -d' ' -f1)
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ]; then
    say "venv $VENV (DIRAC $DIRAC_VERSION) is up to date: reused"
else
    rm -f "$STAMP" "$EXT_STAMP"
    build_venv
    echo "$WANT" > "$STAMP"
fi

if [ -f "$EXT_PYPROJECT" ]; then
    EXT_WANT=$(sha256sum < "$EXT_PYPROJECT" | cut -d' ' -f1)
    if [ -f "$EXT_STAMP" ] && [ "$(cat "$EXT_STAMP")" = "$EXT_WANT" ]; then
        say "the extension is installed (editable): reused"
    else
        rm -f "$EXT_STAMP"
        install_extension
        echo "$EXT_WANT" > "$EXT_STAMP"
    fi
else
    say "NOTE: $EXT_PYPROJECT does not exist yet: the extension is NOT installed (DIRAC alone)"
    rm -f "$EXT_STAMP"
fi

say "done in $(( $(date +%s) - START ))s"
