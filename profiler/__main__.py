"""``python -m profiler`` runs the nprof command line."""

import sys

from profiler.entry import main

sys.exit(main())
