"""Fresh DIRAC databases on MariaDB from the .sql files of the installed DIRAC.

Drops and creates JobDB, JobLoggingDB, PilotAgentsDB and TaskQueueDB (idempotent), as
DIRAC's own installer does (ComponentInstaller.installDatabase), through the `mariadb`/`mysql`
client: it runs the files as they are. TaskQueueDB is DIRAC's original MySQL one, which the
migration tests (fairmatch-dirac import/export) move jobs from and to: its .sql file only
names the database, DIRAC's class creates its tables when it is first constructed.
Run it with the DIRAC venv's python, which is where it finds the .sql files; also imported
by the tests' conftest.

    FAIRMATCH_DIRAC_MYSQL      user[:password]@host:port   (default root@127.0.0.1:3306)
    FAIRMATCH_DIRAC_DB_PREFIX  prefix of the database names (default none: DIRAC's names)
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

DATABASES = ("JobDB", "JobLoggingDB", "PilotAgentsDB", "TaskQueueDB")


@dataclass(frozen=True)
class MySQL:
    user: str = "root"
    password: str = ""
    host: str = "127.0.0.1"
    port: int = 3306
    prefix: str = ""

    @classmethod
    def from_env(cls) -> MySQL:
        spec = os.environ.get("FAIRMATCH_DIRAC_MYSQL", "root@127.0.0.1:3306")
        m = re.fullmatch(r"([^:@]+)(?::([^@]*))?@([^:]+)(?::(\d+))?", spec)
        if not m:
            raise SystemExit(f"FAIRMATCH_DIRAC_MYSQL={spec!r}: expected user[:password]@host[:port]")
        user, password, host, port = m.groups()
        return cls(user, password or "", host, int(port or 3306), os.environ.get("FAIRMATCH_DIRAC_DB_PREFIX", ""))

    def name(self, db: str) -> str:
        return f"{self.prefix}{db}"

    def run(self, sql: str) -> None:
        client = shutil.which("mariadb") or shutil.which("mysql")
        if client is None:
            raise SystemExit("neither `mariadb` nor `mysql` client found (apt-get install mariadb-client)")
        # the password through the environment, not the command line
        env = {**os.environ, "MYSQL_PWD": self.password}
        cmd = [client, f"-u{self.user}", f"-h{self.host}", f"-P{self.port}", "--protocol=TCP", "--batch"]
        done = subprocess.run(cmd, input=sql, text=True, env=env, capture_output=True)
        if done.returncode:
            raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr.strip()}")


def sql_dir() -> Path:
    """DIRAC/WorkloadManagementSystem/DB of the DIRAC this interpreter has, without importing DIRAC."""
    spec = importlib.util.find_spec("DIRAC")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"DIRAC is not installed for {sys.executable}: run ci/bootstrap.sh")
    return Path(next(iter(spec.submodule_search_locations))) / "WorkloadManagementSystem" / "DB"


def recreate(mysql: MySQL | None = None) -> MySQL:
    mysql = mysql or MySQL.from_env()
    for db in DATABASES:
        name = mysql.name(db)
        schema = (sql_dir() / f"{db}.sql").read_text()
        # the files `USE` DIRAC's names; a prefix renames them
        schema = re.sub(rf"^USE {db};", f"USE `{name}`;", schema, flags=re.M)
        mysql.run(f"DROP DATABASE IF EXISTS `{name}`; CREATE DATABASE `{name}`;\n{schema}")
    return mysql


if __name__ == "__main__":
    m = recreate()
    print(f"created {', '.join(m.name(d) for d in DATABASES)} on {m.host}:{m.port} from {sql_dir()}")
