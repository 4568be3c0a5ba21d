"""``python -m profiler`` runs the nprof command line."""

import sys

from profiler.cli.main import main

sys.exit(main())
