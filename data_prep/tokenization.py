"""`from data_prep import tokenization`: the original release's import path, kept
for users. The module is data_prep/text/tokenization.py; this name is that same module
object (not a copy), so its functions, classes and flags exist once.
"""

import sys

from data_prep.text import tokenization as _module

sys.modules[__name__] = _module
