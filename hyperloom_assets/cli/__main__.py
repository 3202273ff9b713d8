"""`python -m hyperloom_assets.cli`: the `hyperloom` command without its console script."""

import sys

from hyperloom_assets.cli.main import main

sys.exit(main())
