"""`python -m serl.cli COMMAND ...`, as the `serl` command."""

import sys

from serl.cli import main

if __name__ == "__main__":  # not in a spawned child, which imports this module as __mp_main__
    sys.exit(main())
