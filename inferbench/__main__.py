"""``python -m inferbench COMMAND ...`` is the ``inferbench`` console script."""

import sys

from .commands import main

sys.exit(main())
