"""launchdeck: a dashboard that launches and debugs SGLang servers on GPU hosts over SSH."""

import warnings

# cryptography 51 deprecates DSA, which asyncssh imports whether or not a DSA key is ever used
# (launchdeck uses none): without this, every start prints the warning. Only that one is hidden.
warnings.filterwarnings("ignore", message="DSA is deprecated", module=r"asyncssh\.")
