"""``python -m llmguard_sdk.cli``: the ``llmguard`` command."""

import sys

from . import main

sys.exit(main())
