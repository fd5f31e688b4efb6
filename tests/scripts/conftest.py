"""The scripts' tests import the harness as the scripts do: with ``scripts/`` on ``sys.path``."""

import sys

from tests.scripts.script_modules import SCRIPTS

sys.path.insert(0, str(SCRIPTS))
