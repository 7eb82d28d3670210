"""`python -m composer` runs the command line, like the `composer` script."""

from composer.cli.app import main

main()
