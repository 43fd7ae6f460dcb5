"""The team's memory of failures: signatures seen before, team rules, re-diagnosis, comparisons."""
