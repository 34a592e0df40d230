"""``python -m redbeat``: the standalone command line."""

from .cli import main

main(prog_name="redbeat")
