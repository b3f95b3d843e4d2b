"""`python -m cuvil` is the `cuvil` command."""

import sys

from cuvil.cli import main

sys.exit(main())
