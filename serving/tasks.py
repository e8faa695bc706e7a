"""`from serving import tasks`: the import path earlier docs showed, kept for users. The
module is serving/exports.py; this name is that same module object (not a copy)."""

import sys

from serving import exports as _module

sys.modules[__name__] = _module
