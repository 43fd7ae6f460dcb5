"""`python -m app.cli`, as the `launchdeck` command."""

import sys

from app.cli import main

sys.exit(main())
