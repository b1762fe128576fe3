"""The runtime probe: watch real TensorFlow training, report why gradients are None.

`with tapecheck.probe() as p:` ... `p.findings`; `tapecheck probe script.py`;
the pytest plugin (`--tapecheck`, fixture `tapecheck_probe`). Importing this
package is light; TensorFlow is imported when a probe starts.
"""

import sys
import types

from tapecheck.probe.session import Probe, ProbeError, probe

__all__ = ["Probe", "ProbeError", "probe"]


class _CallableModule(types.ModuleType):
    # Once `tapecheck.probe` (this package) is imported, Python binds the name
    # `probe` on `tapecheck` to the package itself, hiding the function that
    # `tapecheck.__getattr__` would return. Calling the package keeps
    # `tapecheck.probe()` working either way.
    def __call__(self):
        return probe()


sys.modules[__name__].__class__ = _CallableModule
