"""A simulated SGLang for the simulated GPU hosts: same entry points, arguments, logs and failures.

It exists only on the simulated hosts' PYTHONPATH. Standard library only.
"""

__version__ = "0.5.10+launchdeck.sim"
