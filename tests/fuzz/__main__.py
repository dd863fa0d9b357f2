"""``python -m tests.fuzz`` (from the repository root): see :mod:`.cli`."""

import os
import sys

# the harness imports the tests' `support` package, as the tests do (tests/conftest.py)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from fuzz.cli import main

sys.exit(main())
