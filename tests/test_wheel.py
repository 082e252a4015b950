"""The wheel `pip install fairmatch` gets: the `fairmatch` package with its migrations and
the console's templates and static files, nothing else at the top level, and a console
script that runs from it."""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from fairmatch.api import docs

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(out),
            str(REPO),
        ],
        check=True,
        capture_output=True,
    )
    [built] = out.glob("fairmatch-*.whl")
    return built


def test_the_wheel_holds_the_fairmatch_package_and_nothing_else(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/", 1)[0] for name in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"fairmatch"}
    assert "fairmatch/migrations/env.py" in names
    assert any(n.startswith("fairmatch/migrations/versions/0001_") for n in names)
    assert not any("__pycache__" in n for n in names)
    # the web console's files, which no import brings in
    console = REPO / "fairmatch" / "console"
    shipped = {str(f.relative_to(REPO)) for kind in ("templates", "static") for f in (console / kind).iterdir()}
    assert shipped and shipped <= set(names)
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "fairmatch = fairmatch.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()


def test_the_wheel_brings_swagger_ui_for_docs_along(wheel):
    """/docs loads Swagger UI from the package that ships its files, never from a CDN: the
    wheel must require that package, and the files /docs serves must be in it."""
    names = zipfile.ZipFile(wheel).namelist()
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert re.search(r"^Requires-Dist: swagger-ui-bundle-v2\b", metadata, re.MULTILINE)
    assert all((docs.SWAGGER_UI / name).is_file() for name in docs.FILES)


def test_the_unpacked_wheel_migrates_a_database_from_its_own_migrations(wheel, tmp_path):
    unpacked = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(unpacked)
    script = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "import fairmatch; assert fairmatch.__file__.startswith(sys.argv[1]), fairmatch.__file__;"
        "from fairmatch.db import migrate;"
        "assert str(migrate.migrations_dir()).startswith(sys.argv[1]);"
        "migrate.upgrade(sys.argv[2]); print(migrate.head_revision(sys.argv[2]))"
    )
    database = f"sqlite:///{tmp_path / 'wheel.db'}"
    done = subprocess.run(
        [sys.executable, "-c", script, str(unpacked), database], cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()
