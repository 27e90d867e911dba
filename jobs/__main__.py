"""``python -m jobs merge --config broker.properties`` (or the same file given to
``spark-submit --master spark://...``)."""

import sys

from jobs.cli import main

sys.exit(main())
