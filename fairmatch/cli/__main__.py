"""`python -m fairmatch.cli`: the same as the `fairmatch` console script."""

from fairmatch.cli import main

main()
