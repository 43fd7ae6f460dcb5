"""A simulated SGLang for the simulated GPU hosts: same entry points, arguments, logs and failures.

It exists only on the simulated hosts' PYTHONPATH. Standard library only. It plays one of the
real releases in `sglang.version.RELEASES`, chosen per process by the environment.
"""

from sglang import _installed
from sglang.version import release

_installed.install()

__version__ = f"{release()}+launchdeck.sim"
