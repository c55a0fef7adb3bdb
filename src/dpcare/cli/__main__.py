"""``python -m dpcare.cli``."""

from dpcare.cli import main

main()
