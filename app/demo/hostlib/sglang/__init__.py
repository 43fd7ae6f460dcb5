"""A simulated SGLang for the simulated GPU hosts: same entry points, arguments, logs and failures.

It exists only on the simulated hosts' PYTHONPATH. Standard library only. It plays one of the
real releases in `sglang.version.RELEASES`, chosen per process by the environment.
"""

from sglang.version import release

__version__ = f"{release()}+launchdeck.sim"
