"""`python -m app.cli`: the same as the `fairmatch` console script."""

from app.cli import main

main()
