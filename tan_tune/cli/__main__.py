"""`python -m tan_tune.cli`: the same as the `tan-tune` command."""

import sys

from tan_tune.cli import main

sys.exit(main.main())
