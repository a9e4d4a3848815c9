"""`python -m lab.cli`: the `locklab` command."""

from lab.cli import main

main()
