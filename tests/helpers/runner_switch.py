"""Several runners' mains in one process (one TensorFlow start-up): each runner
defines its absl flags when imported, and two runners define flags of the same names,
so before the next runner is imported the flags the last one defined are removed
(absl's own are kept). Light to import: test drivers import it in their subprocess.
"""

import importlib
import types

from absl import flags


def switch_runner(runner: types.ModuleType | None, module: str) -> types.ModuleType:
    """The runner module `module`: `runner` itself when it is that module, else the
    module imported after `runner`'s flags are removed. A runner is imported once per
    process: its runs come together."""
    if runner is not None and runner.__name__ == module:
        return runner
    if runner is not None:
        by_module = flags.FLAGS.flags_by_module_dict().items()
        names = {f.name for m, fs in by_module if not m.startswith("absl") for f in fs}
        for name in names:
            delattr(flags.FLAGS, name)
    return importlib.import_module(module)
