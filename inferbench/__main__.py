"""``python -m inferbench`` is ``python -m inferbench.run``."""

import sys

from .run import main

sys.exit(main())
