"""The runtime probe: watch real TensorFlow training, report why gradients are None.

`with tapecheck.probe() as p:` ... `p.findings`; `tapecheck probe script.py`;
the pytest plugin (`--tapecheck`, fixture `tapecheck_probe`). Importing this
package is light; TensorFlow is imported when a probe starts.
"""

from tapecheck.probe.session import Probe, ProbeError, probe

__all__ = ["Probe", "ProbeError", "probe"]
