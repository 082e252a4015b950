#!/usr/bin/env bash
# DIRAC 9 with the FairmatchDIRAC extension against a real fairmatch service: what `make test`
# runs. The venv (ci/bootstrap.sh), fresh DIRAC databases on MariaDB (ci/mariadb.py), then
# the suite in integrations/dirac/tests. Arguments go to pytest.
#   FAIRMATCH_DIRAC_BACKEND=postgresql|sqlite   the service's database (default postgresql)
#   FAIRMATCH_BIN                              the service's venv bin (default <repo>/.venv/bin)
set -euo pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)   # integrations/dirac
REPO=$(cd "$HERE/../.." && pwd)
VENV=${FAIRMATCH_DIRAC_VENV:-$HERE/.venv}
export FAIRMATCH_BIN=${FAIRMATCH_BIN:-$REPO/.venv/bin}
[ -x "$FAIRMATCH_BIN/fairmatch" ] || { echo "no fairmatch at $FAIRMATCH_BIN: run make install" >&2; exit 2; }

"$HERE/ci/bootstrap.sh"
"$VENV/bin/python" "$HERE/ci/mariadb.py"

cd "$REPO"
set +e
# the whole suite, or the test files and node ids given first
if [ $# -gt 0 ] && [ -e "${1%%::*}" ]; then targets=(); else targets=("$HERE/tests"); fi
"$VENV/bin/python" -m pytest "${targets[@]}" -p no:cacheprovider "$@"
rc=$?
set -e
# 5: no test was collected, which here means the suite is broken, not that all is well
if [ "$rc" = 5 ]; then echo "run-tests.sh: pytest collected no tests" >&2; exit 1; fi
exit "$rc"
