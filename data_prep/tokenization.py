"""`from data_prep import tokenization`: this project's older import path of the
WordPiece tokenizer, from before data_prep/ was split into sub-packages, kept so that
code written against it still runs. The module is data_prep/text/tokenization.py
(`from data_prep.text import tokenization`, the path the docs teach); this name is that
same module object (not a copy), so its functions, classes and flags exist once.
"""

import sys

from data_prep.text import tokenization as _module

sys.modules[__name__] = _module
