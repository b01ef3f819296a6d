"""``python -m eagle3_conformance.cli``: the ``conformance`` command."""

import sys

from eagle3_conformance.cli import main

sys.exit(main())
